package bench

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultKeysPerFile is how many device keys one file of the key cache
// holds unless KeyCache.PerFile says otherwise.
const DefaultKeysPerFile = 1000

// KeyCache holds the simulated devices' RSA-2048 keys in a folder, so that
// a rerun does not generate them again: generating one takes about 50 ms
// of a core here, 100,000 about 40 minutes on two cores. Device i (1-based)
// has key i-1 of the cache, whatever its name. The files are PEM, PerFile
// keys each, named rsa2048-<PerFile>per-NNNN.pem, written whole (a temporary file renamed)
// so that an interrupted generation leaves no partial file.
//
// The keys are test material for the benchmark's simulated devices only:
// the development provider keeps their public halves, and nothing else
// trusts them.
type KeyCache struct {
	// Dir is the folder; it is created when missing.
	Dir string
	// PerFile is how many keys a file holds (the unit of generation).
	// Default DefaultKeysPerFile.
	PerFile int
}

func (c KeyCache) perFile() int {
	if c.PerFile > 0 {
		return c.PerFile
	}
	return DefaultKeysPerFile
}

func (c KeyCache) file(i int) string {
	return filepath.Join(c.Dir, fmt.Sprintf("rsa2048-%dper-%04d.pem", c.perFile(), i))
}

// Ensure makes the cache hold at least n keys, generating the missing
// files on every core (their number is GOMAXPROCS), and returns how many
// keys it generated.
func (c KeyCache) Ensure(ctx context.Context, log *slog.Logger, n int) (int, error) {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return 0, fmt.Errorf("scalebench: key cache: %w", err)
	}
	var missing []int
	per := c.perFile()
	for f := range (n + per - 1) / per {
		if _, err := os.Stat(c.file(f)); errors.Is(err, os.ErrNotExist) {
			missing = append(missing, f)
		} else if err != nil {
			return 0, fmt.Errorf("scalebench: key cache: %w", err)
		}
	}
	if len(missing) == 0 {
		return 0, nil
	}
	log.Info("generating device keys once", "files", len(missing), "keys", len(missing)*per, "cache", c.Dir)
	began := time.Now()
	var (
		next atomic.Int64
		done atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(missing) || ctx.Err() != nil {
					return
				}
				if err := c.generate(ctx, missing[i]); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					cancel()
					return
				}
				log.Info("generated device keys", "files", done.Add(1), "of", len(missing), "took", time.Since(began).Round(time.Second))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("scalebench: key cache: %w", err)
	}
	return len(missing) * per, nil
}

// generate writes file f of the cache.
func (c KeyCache) generate(ctx context.Context, f int) error {
	tmp, err := os.CreateTemp(c.Dir, ".rsa2048-*.tmp")
	if err != nil {
		return fmt.Errorf("scalebench: key cache: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	for range c.perFile() {
		if err := ctx.Err(); err != nil {
			_ = tmp.Close()
			return fmt.Errorf("scalebench: key cache: %w", err)
		}
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			_ = tmp.Close()
			return fmt.Errorf("scalebench: key cache: %w", err)
		}
		if err := pem.Encode(tmp, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}); err != nil {
			_ = tmp.Close()
			return fmt.Errorf("scalebench: key cache: %w", err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("scalebench: key cache: %w", err)
	}
	if err := os.Rename(tmp.Name(), c.file(f)); err != nil {
		return fmt.Errorf("scalebench: key cache: %w", err)
	}
	return nil
}

// Load returns the first n keys (Ensure first), parsed on every core.
func (c KeyCache) Load(ctx context.Context, n int) ([]*rsa.PrivateKey, error) {
	per := c.perFile()
	files := (n + per - 1) / per
	keys := make([]*rsa.PrivateKey, files*per)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for {
				f := int(next.Add(1)) - 1
				if f >= files || ctx.Err() != nil {
					return
				}
				if err := c.load(f, keys[f*per:(f+1)*per]); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("scalebench: key cache: %w", err)
	}
	return keys[:n], nil
}

func (c KeyCache) load(f int, into []*rsa.PrivateKey) error {
	raw, err := os.ReadFile(c.file(f))
	if err != nil {
		return fmt.Errorf("scalebench: key cache: %w", err)
	}
	for i := range into {
		var b *pem.Block
		b, raw = pem.Decode(raw)
		if b == nil || b.Type != "RSA PRIVATE KEY" {
			return fmt.Errorf("scalebench: key cache: %s holds %d keys, want %d: delete the file and run again to regenerate it", c.file(f), i, len(into))
		}
		if into[i], err = x509.ParsePKCS1PrivateKey(b.Bytes); err != nil {
			return fmt.Errorf("scalebench: key cache: %s key %d: %w: delete the file and run again to regenerate it", c.file(f), i, err)
		}
	}
	return nil
}

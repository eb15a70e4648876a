package scalebench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
)

// DeviceName is the id of the i-th simulated device (1-based).
func DeviceName(i int) string { return "sim-" + strconv.Itoa(i) }

// keyFile is where the i-th device's key file is written in dir.
func keyFile(dir string, i int) string { return filepath.Join(dir, DeviceName(i)+".json") }

// enroll enrolls devices from+1..to as internal/callouttest does: a machine
// user and key at the development provider, the fleet-identity entry the
// operator would project from the Device resource, and the key file (mode
// 0600, with the issuer, audience and device as `fleet enroll` writes them).
// The provider generates one RSA key per device (its only way to add a
// key), so the work runs on every core at once.
func (cp *controlPlane) enroll(ctx context.Context, log *slog.Logger, dir string, from, to int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	next.Store(int64(from))
	for range max(1, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > to || ctx.Err() != nil {
					return
				}
				if i%1000 == 0 {
					log.Info("enrolling", "device", i, "of", to)
				}
				if err := cp.enrollOne(ctx, dir, i); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (cp *controlPlane) enrollOne(ctx context.Context, dir string, i int) error {
	dev := DeviceName(i)
	uid, err := cp.provider.CreateMachineUser(ctx, "device-"+dev)
	if err != nil {
		return fmt.Errorf("scalebench: enroll %s: %w", dev, err)
	}
	kf, err := cp.provider.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		return fmt.Errorf("scalebench: enroll %s: %w", dev, err)
	}
	v, err := authcallout.IdentityEntry{Device: dev}.Encode()
	if err != nil {
		return fmt.Errorf("scalebench: enroll %s: %w", dev, err)
	}
	key, err := events.IdentityKey(uid)
	if err != nil {
		return fmt.Errorf("scalebench: enroll %s: %w", dev, err)
	}
	if _, err := cp.identity.Put(ctx, key, v); err != nil {
		return fmt.Errorf("scalebench: enroll %s: identity: %w", dev, err)
	}
	kf.Issuer, kf.Audience, kf.Device = cp.provider.Issuer(), cp.provider.Audience(), dev
	if err := credential.WriteKeyFile(keyFile(dir, i), kf); err != nil {
		return fmt.Errorf("scalebench: enroll %s: %w", dev, err)
	}
	return nil
}

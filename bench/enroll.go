package bench

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
)

// DeviceName is the id of the i-th simulated device (1-based).
func DeviceName(i int) string { return "sim-" + strconv.Itoa(i) }

// FlooderName is the id of the i-th flooding device (1-based): enrolled and
// connected like the simulated devices, never a rollout target.
func FlooderName(i int) string { return "flood-" + strconv.Itoa(i) }

// keyFile is where the key file of device dev is written in dir.
func keyFile(dir, dev string) string { return filepath.Join(dir, dev+".json") }

// enrollIOWorkers is how many devices are enrolled at once with cached
// keys.
const enrollIOWorkers = 64

// enroll enrolls the devices named with the plane's EnrollDevice: a machine
// user and key at the development provider, the fleet-identity entry the
// operator would project from the Device resource, and the key file (mode
// 0600, with the issuer, audience and device as `fleet enroll` writes them).
// With keys (names[i] gets keys[i]) the provider keeps each key's public
// half, enrollIOWorkers devices at once; without, it generates one RSA key
// per device, on every core at once.
func (cp *controlPlane) enroll(ctx context.Context, log *slog.Logger, dir string, names []string, keys []*rsa.PrivateKey) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	workers := max(1, runtime.GOMAXPROCS(0)) // the provider generates keys: CPU-bound
	if keys != nil {
		// Uploading a public key is cheap; the fleet-identity put waits
		// for its fsync (on every replica): I/O-bound.
		workers = enrollIOWorkers
	}
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1))
				if i > len(names) || ctx.Err() != nil {
					return
				}
				if i%1000 == 0 {
					log.Info("enrolling", "device", i, "of", len(names))
				}
				dev := names[i-1]
				var err error
				if keys != nil {
					_, err = cp.plane.EnrollDeviceWithKey(ctx, dev, keyFile(dir, dev), keys[i-1])
				} else {
					_, err = cp.plane.EnrollDevice(ctx, dev, keyFile(dir, dev))
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("scalebench: %w", err))
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

package operator_test

// The setup the operator's benchmarks against the real kube-apiserver
// share (kube_coldstart, kube_rollout, follow): their environment, many
// Devices created at once, the Device controller.

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// envInt is the environment variable name's value when it is a whole
// number above 0, else def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// createDevices creates n Devices with labels in e's namespace, named
// name(i) with identity subject "sub-"+name(i) for i in 1..n, eight
// requests at a time, and returns how long it took.
func createDevices(b *testing.B, e *env, n int, labels map[string]string, name func(i int) string) time.Duration {
	b.Helper()
	t0 := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)); i <= n; i = int(next.Add(1)) {
				d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: name(i), Namespace: e.ns, Labels: labels},
					Spec: fleetv1.DeviceSpec{IdentitySubject: "sub-" + name(i)}}
				if err := e.c.Create(e.ctx, d); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// benchEnv is a benchmark's env whose context lasts timeout.
func benchEnv(b *testing.B, timeout time.Duration) *env {
	b.Helper()
	e := newEnv(b)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	b.Cleanup(cancel)
	e.ctx = ctx
	return e
}

// withDeviceController turns e's Device controller on, with
// FLEET_KUBE_DEVICE_WORKERS workers when set.
func withDeviceController(e *env) {
	e.deviceController = true
	if v := envInt("FLEET_KUBE_DEVICE_WORKERS", 0); v > 0 {
		e.deviceWorkers = v
	}
}

package podman_test

import (
	"context"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// BenchmarkCreateStart compares create+start of one container through the
// Runtime with the same two bindings calls made directly, alternating the
// two in each iteration so that machine load hits both alike. It reports
// runtime-ms/op, bindings-ms/op and their ratio (runtime/bindings); removal
// is outside the timings.
//
//	CGO_ENABLED=0 go test -tags '…' -run '^$' -bench CreateStart -benchtime 20x ./agent/runtime/podman
func BenchmarkCreateStart(b *testing.B) {
	rt, ctx := newRuntime(b)
	image := localImage(b, "running", runningFile)
	labels := podmantest.Labels(b)
	remove := func(id string) {
		if _, err := containers.Remove(ctx, id, new(containers.RemoveOptions).WithForce(true).WithTimeout(0)); err != nil {
			b.Fatalf("remove: %v", err)
		}
	}
	var viaRuntime, viaBindings time.Duration
	iter := 0
	b.ResetTimer()
	for b.Loop() {
		name := "bench-" + randomSuffix(b)
		viaRuntimeFn := func() string {
			began := time.Now()
			id, err := rt.Create(context.Background(), runtime.ContainerSpec{Name: name + "-rt", Image: image, Labels: labels})
			if err != nil {
				b.Fatalf("Runtime.Create: %v", err)
			}
			if err := rt.Start(context.Background(), id); err != nil {
				b.Fatalf("Runtime.Start: %v", err)
			}
			viaRuntime += time.Since(began)
			return id
		}
		viaBindingsFn := func() string {
			began := time.Now()
			s := specgen.NewSpecGenerator(image, false)
			s.Name = name + "-b"
			s.Labels = labels
			s.RestartPolicy = runtime.RestartNo
			resp, err := containers.CreateWithSpec(ctx, s, nil)
			if err != nil {
				b.Fatalf("bindings create: %v", err)
			}
			if err := containers.Start(ctx, resp.ID, nil); err != nil {
				b.Fatalf("bindings start: %v", err)
			}
			viaBindings += time.Since(began)
			return resp.ID
		}
		// Alternate which goes first: the first after the removals pays more.
		var id, bid string
		if iter%2 == 0 {
			id, bid = viaRuntimeFn(), viaBindingsFn()
		} else {
			bid, id = viaBindingsFn(), viaRuntimeFn()
		}
		iter++

		b.StopTimer()
		remove(id)
		remove(bid)
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(viaRuntime.Seconds()*1000/n, "runtime-ms/op")
	b.ReportMetric(viaBindings.Seconds()*1000/n, "bindings-ms/op")
	b.ReportMetric(float64(viaRuntime)/float64(viaBindings), "ratio")
}

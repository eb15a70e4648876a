package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/specgen"

	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// BenchmarkApplyVsBindings compares the agent bringing up a one-service
// Deployment (preflight: list, image check; create; start) with the same
// container created and started by direct bindings calls, alternating the
// two so load hits both. Goal (issue): ratio ≤ 1.2. Figures, not assertions.
//
//	go test -tags '…' -run '^$' -bench ApplyVsBindings -benchtime 20x ./agent
func BenchmarkApplyVsBindings(b *testing.B) {
	conn := podmantest.Connect(b)
	image := podmantest.BuildImage(b, "runs", runsFile)
	w := newPodmanWorldB(b)
	var viaAgent, viaBindings time.Duration
	for i := 0; b.Loop(); i++ {
		name := fmt.Sprintf("bench-%s-%d", w.suffix, i)
		agentFn := func() {
			e := w.entryB(b, int64(i+1), score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: name + "-a", Image: image}}}})
			began := time.Now()
			if err := w.r.Apply(context.Background(), e); err != nil {
				b.Fatal(err)
			}
			viaAgent += time.Since(began)
		}
		var bid string
		bindingsFn := func() {
			began := time.Now()
			s := specgen.NewSpecGenerator(image, false)
			s.Name = name + "-b"
			s.Labels = podmantest.Labels(b)
			resp, err := containers.CreateWithSpec(conn, s, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := containers.Start(conn, resp.ID, nil); err != nil {
				b.Fatal(err)
			}
			viaBindings += time.Since(began)
			bid = resp.ID
		}
		if i%2 == 0 {
			agentFn()
			bindingsFn()
		} else {
			bindingsFn()
			agentFn()
		}
		b.StopTimer()
		if err := w.r.Remove(context.Background(), w.ns, "analysis"); err != nil {
			b.Fatal(err)
		}
		if _, err := containers.Remove(conn, bid, new(containers.RemoveOptions).WithForce(true).WithTimeout(0)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(viaAgent.Seconds()*1000/n, "agent-ms/op")
	b.ReportMetric(viaBindings.Seconds()*1000/n, "bindings-ms/op")
	b.ReportMetric(viaAgent.Seconds()/viaBindings.Seconds(), "ratio")
}

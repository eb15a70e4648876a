package agent

import (
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
)

func TestTheCountedRuntimePassesWatchAndLogsThroughAndCountsTheirFailures(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rt := sim.New(sim.Options{LocalImages: []string{"reg.example/api:v1"},
		Behave: func(runtime.ContainerSpec) sim.Behaviour { return sim.Behaviour{Output: []string{"ready"}} }})
	m := NewMetrics(nil)
	c := countedRuntime{rt: rt, m: m}

	events, err := c.Watch(ctx, map[string]string{"app": "api"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := c.Create(ctx, runtime.ContainerSpec{Name: "api", Image: "reg.example/api:v1", Labels: map[string]string{"app": "api"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	if e := <-events; e.Kind != runtime.EventStart || e.ID != id {
		t.Errorf("the watch delivered %+v, want the start of %s", e, id)
	}
	if lines, err := c.Logs(ctx, id, 5); err != nil || len(lines) != 1 || lines[0] != "ready" {
		t.Errorf("Logs = %q, %v; want [ready]", lines, err)
	}

	rt.SetUnavailable(true)
	if _, err := c.Watch(ctx, nil); err == nil {
		t.Error("Watch of an unavailable engine succeeded")
	}
	if _, err := c.Logs(ctx, id, 5); err == nil {
		t.Error("Logs of an unavailable engine succeeded")
	}
	for _, op := range []string{opWatch, opLogs} {
		var got dto.Metric
		if err := m.runtimeErrors.WithLabelValues(op).Write(&got); err != nil {
			t.Fatal(err)
		}
		if got.GetCounter().GetValue() != 1 {
			t.Errorf("%s errors = %v, want 1", op, got.GetCounter().GetValue())
		}
	}
}

package agent_test

import (
	"slices"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/score"
)

// TestRestoreBringsBackWhatTheRestartPolicyWouldWithoutTheIntent: after a
// reboot, Restore (what an agent that cannot read its intent does) starts
// the device's services whose restart policy restarts them, and nothing
// else: no init container, no service kept down by its policy, no
// container of another device or of no Deployment.
func TestRestoreBringsBackWhatTheRestartPolicyWouldWithoutTheIntent(t *testing.T) {
	w := newWorld(t, func(o *sim.Options) { o.Now = time.Now }) // a clock: the reboot's cut-short exits show
	w.r.Device = "d1"
	s := score.Score{Data: score.PodmanV0{
		InitContainer: &score.Service{Name: "migrate", Image: "reg.example/migrate:v1"},
		Services: []score.Service{
			{Name: "default", Image: "reg.example/api:v1"},
			{Name: "always", Image: "reg.example/api:v1", RestartPolicy: "always"},
			{Name: "on-failure", Image: "reg.example/api:v1", RestartPolicy: "on-failure"},
			{Name: "never", Image: "reg.example/api:v1", RestartPolicy: "no"},
		},
	}}
	if err := w.r.Apply(w.ctx, entry(t, 1, s)); err != nil {
		t.Fatal(err)
	}
	other := &agent.Reconciler{Runtime: w.rt, Device: "d2", StopTimeout: w.r.StopTimeout}
	d2 := entry(t, 1, score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "d2-web", Image: "reg.example/api:v1"}}}})
	d2.Name = "other"
	if err := other.Apply(w.ctx, d2); err != nil {
		t.Fatal(err)
	}
	foreign := w.foreign("foreign", nil)
	w.rt.Reboot()

	started, err := w.r.Restore(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(started)
	// A reboot cuts the running services' exits short: on-failure restarts
	// them too (the exit the engine shows is stale).
	if want := []string{"always", "default", "on-failure"}; !slices.Equal(started, want) {
		t.Errorf("restored %v, want %v", started, want)
	}
	for _, c := range w.containers() {
		running := c.State == runtime.StateRunning
		switch {
		case c.ID == foreign, c.Labels[agent.LabelDevice] == "d2", c.Name == "migrate", c.Name == "never":
			if running {
				t.Errorf("%s (device %q) was started", c.Name, c.Labels[agent.LabelDevice])
			}
		case !running:
			t.Errorf("%s is %s, want running", c.Name, c.State)
		}
	}
}

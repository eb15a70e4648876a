package operator_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

// windowImage is the image of the window tests' Deployment, present on the
// simulated devices.
const windowImage = "registry.example.com/api:v1"

// runWindowAgent runs the real agent of device dev on a simulated runtime,
// on its own connection to the env's NATS server, with the device clock
// clock (unix seconds) read in loc.
func (e *env) runWindowAgent(dev string, loc *time.Location, clock *atomic.Int64) {
	e.t.Helper()
	nc, err := nats.Connect(e.store.JetStream().Conn().ConnectedUrl(), nats.CustomInboxPrefix("_INBOX_"+dev))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Options{Device: dev, Conn: nc, AgentVersion: "test", HeartbeatInterval: time.Hour,
			Logger: slog.New(slog.DiscardHandler), TaskPoll: 20 * time.Millisecond,
			Now:        func() time.Time { return time.Unix(clock.Load(), 0).In(loc) },
			Reconciler: &agent.Reconciler{Device: dev, Runtime: sim.New(sim.Options{LocalImages: []string{windowImage}}), StopTimeout: time.Second}})
	}()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("agent %s: %v", dev, err)
		}
	})
}

// TestARolloutWithAMaintenanceWindowWaitsWithoutFailing is ADR 0029 end to
// end: real agents on simulated devices, handed a revision outside its
// maintenance window (their local time), keep it Pending with when the
// window opens; status.window counts them and the earliest opening; the
// operator's target timeout removes a silent target but never a waiting
// one, and the progress deadline does not run while they wait; once the
// window opens they switch and the rollout succeeds.
func TestARolloutWithAMaintenanceWindowWaitsWithoutFailing(t *testing.T) {
	e := newEnv(t)
	// A target silent for 10 s is removed: win-3, and never a device of
	// a loaded machine whose agent has not yet said it waits.
	e.targetTimeout = 10 * time.Second
	e.progressDeadline = time.Second
	e.startOperator()
	loc := time.FixedZone("device", 3*3600)
	var clock atomic.Int64
	clock.Store(time.Date(2026, 12, 5, 1, 0, 0, 0, loc).Unix()) // the window opens in an hour
	for _, dev := range []string{"win-1", "win-2", "win-3"} {
		e.device(dev, map[string]string{"role": "win"})
	}
	e.runWindowAgent("win-1", loc, &clock)
	e.runWindowAgent("win-2", loc, &clock)
	// win-3 has no agent: silent, it is removed after the target timeout.
	d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: e.ns},
		Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "win"}},
			Rollout: fleetv1.RolloutSpec{MaintenanceWindow: &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "1h"}},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
				Name: "api", Image: windowImage}}}}}}
	created := time.Now()
	if err := e.c.Create(e.ctx, d); err != nil {
		t.Fatal(err)
	}
	if rev := e.revisionOf("api", 1); rev.Window == nil || *rev.Window != (events.MaintenanceWindow{Start: "02:00", Duration: "1h"}) {
		t.Fatalf("the revision froze window %v", rev.Window)
	}
	removed := func(st fleetv1.DeploymentStatus) []string {
		var out []string
		for _, rm := range st.Removed {
			out = append(out, rm.Device)
		}
		return out
	}
	var st fleetv1.DeploymentStatus
	e.waitFor("two targets waiting for their window, the silent one removed and the deadline held", func() bool {
		st = e.get("api").Status
		prog := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionProgressing)
		return st.Window != nil && st.Window.Waiting == 2 && slices.Equal(removed(st), []string{"win-3"}) &&
			prog != nil && prog.Reason == fleetv1.ReasonRolloutProgressing && strings.Contains(prog.Message, "wait for their maintenance window")
	})
	if st.Counts.Failed != 0 || st.Counts.Pending != 2 || st.Phase != fleetv1.PhaseProgressing {
		t.Errorf("waiting targets counted as failing: phase %s, counts %+v", st.Phase, st.Counts)
	}
	// The opening is on the operator's clock: an hour after the report.
	if at := st.Window.NextOpening; at == nil || at.Time.Before(created.Add(time.Hour-time.Minute)) || at.Time.After(time.Now().Add(time.Hour+time.Minute)) {
		t.Errorf("status.window.nextOpening %v, want about an hour from now", at)
	}

	clock.Store(time.Date(2026, 12, 5, 2, 10, 0, 0, loc).Unix()) // inside the window
	e.waitFor("the rollout to succeed once the window opened", func() bool {
		st = e.get("api").Status
		return st.Phase == fleetv1.PhaseSucceeded
	})
	if st.Window == nil || st.Window.Waiting != 0 || st.Window.NextOpening != nil || st.Counts.Succeeded != 2 {
		t.Errorf("after the switch: window %+v, counts %+v", st.Window, st.Counts)
	}
}

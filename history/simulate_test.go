package history_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// watchIntent waits, as an agent does, on device's fleet-intent key
// until its value runs generation gen of lab/name: it answers as soon as
// the operator hands the revision over, whatever the wait before.
func (f *fleetRun) watchIntent(device, name string, gen int64) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	w, err := f.kv.Watch(ctx, device)
	if err != nil {
		f.t.Fatal(err)
	}
	defer w.Stop()
	for e := range w.Updates() {
		if e == nil {
			continue // the current values are delivered
		}
		var v events.DeviceIntent
		if json.Unmarshal(e.Value(), &v) != nil {
			continue
		}
		for _, d := range v.Deployments {
			if d.Name == name && d.Generation == gen {
				return
			}
		}
	}
	f.t.Fatalf("%s's intent never ran %s generation %d: %v", device, name, gen, ctx.Err())
}

// approve gives the approval of batch of rev once the rollout awaits it,
// as the operator records one (rollout.approved).
func (f *fleetRun) approve(rev events.DeploymentRevisionCreated, batch int) {
	f.t.Helper()
	f.waitFor(fmt.Sprintf("generation %d to await the approval of batch %d", rev.Generation, batch), func() bool {
		st, ok := f.statuses.get("lab", "api")
		return ok && st.Revision != nil && st.Revision.Generation == rev.Generation && st.Plan != nil && st.Plan.AwaitingApproval == int32(batch)
	})
	f.append(events.Keys{Namespace: "lab", Name: "api"}, events.NewRolloutTransition(events.TypeRolloutApproved, events.RolloutTransition{
		UID: rev.UID, Generation: rev.Generation, RevisionID: rev.RevisionID, Batch: batch, By: "ana", Request: fmt.Sprintf("r%d-%d", rev.Generation, batch)}),
		events.WithCorrelation(rev.UID, rev.Generation))
}

// simTolerance is the stated error of a simulated stage time against the
// recorded one, for rollouts whose devices answer as before: the
// operator's and the agents' reaction times on a loaded machine, which the
// simulation replays from the history before the rollout.
const simTolerance = 750 * time.Millisecond

// TestASimulationOfARecordedRolloutsOwnPlanPredictsItsStageTimes runs the
// operator's real rollout runner through a rollout without a plan (d6
// fails), one with two soaking batches (d6 fails again, within batch 2's
// threshold), one with a manual approval before each batch and one whose
// only batch d6 fails and which pauses, while the test plays the agents
// and the approver; then simulates each rollout's own plan against the
// history before it (with the recorded approvals' delays) and compares
// every stage's start and end, and how it ended, with the recorded
// transitions.
func TestASimulationOfARecordedRolloutsOwnPlanPredictsItsStageTimes(t *testing.T) {
	f := startFleet(t)
	all := []string{"d1", "d2", "d3", "d4", "d5", "d6"}
	answer := func(rev events.DeploymentRevisionCreated, devices ...string) {
		for _, d := range devices {
			f.watchIntent(d, "api", rev.Generation)
			f.agentReport(d, "api", rev.UID, rev.Generation, rev.RevisionID, events.WorkloadApplying, "")
			if d == "d6" {
				f.agentReport(d, "api", rev.UID, rev.Generation, rev.RevisionID, events.WorkloadFailed, "api exited with 1")
				continue
			}
			f.agentReport(d, "api", rev.UID, rev.Generation, rev.RevisionID, events.WorkloadConverged, "")
		}
	}
	g1 := f.scoredRevision("api", "a1b2c3", 1, "registry.example.com/api:v1", all, []string{"d1"}, nil, nil)
	answer(g1, all...)
	f.waitPhase("api", 1, fleetv1.PhaseFailed)

	plan := &events.RolloutPlan{Batches: []events.PlanBatch{{Size: 2, SuccessPercent: 100, SoakSeconds: 1}, {Size: 3, SuccessPercent: 50, SoakSeconds: 1}}}
	g2 := f.scoredRevision("api", "a1b2c3", 2, "registry.example.com/api:v1", all, []string{"d1"}, plan, []int{0, 1, 1, 2, 2, 2})
	answer(g2, "d1", "d2", "d3", "d4", "d5", "d6")
	f.waitPhase("api", 2, fleetv1.PhaseSucceeded)

	// Manual approval of each batch, given by the test as the operator
	// records one (rollout.approved).
	manual := &events.RolloutPlan{Approval: events.ApprovalManual, Batches: []events.PlanBatch{{Size: 2, SuccessPercent: 100}, {Size: 3, SuccessPercent: 50}}}
	g3 := f.scoredRevision("api", "a1b2c3", 3, "registry.example.com/api:v1", all, []string{"d1"}, manual, []int{0, 1, 1, 2, 2, 2})
	answer(g3, "d1")
	f.approve(g3, 1)
	answer(g3, "d2", "d3")
	f.approve(g3, 2)
	answer(g3, "d4", "d5", "d6")
	f.waitPhase("api", 3, fleetv1.PhaseSucceeded)

	// One batch of every non-canary at 100 %: d6 fails it, the plan pauses.
	pause := &events.RolloutPlan{OnFailure: events.OnFailurePause, Batches: []events.PlanBatch{{Size: 5, SuccessPercent: 100}}}
	g4 := f.scoredRevision("api", "a1b2c3", 4, "registry.example.com/api:v1", all, []string{"d1"}, pause, []int{0, 1, 1, 1, 1, 1})
	answer(g4, all...)
	f.waitFor("generation 4 to pause", func() bool {
		st, ok := f.statuses.get("lab", "api")
		return ok && st.Revision != nil && st.Revision.Generation == 4 && st.Plan != nil && st.Plan.Paused
	})

	h, err := history.New(history.Options{Reader: f.store})
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.SimulateRecorded(context.Background(), "lab", "api", history.SimulateOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Revisions) != 4 || v.NoHistory != 1 {
		t.Fatalf("%d revisions simulated, %d without history; want 4, 1 (generation 1)", len(v.Revisions), v.NoHistory)
	}
	for _, c := range v.Revisions[1:] {
		if c.RecordedEnd != c.PredictedEnd {
			t.Errorf("generation %d: recorded end %s, predicted %s", c.Generation, c.RecordedEnd, c.PredictedEnd)
		}
		for _, m := range c.Marks {
			if m.Recorded < 0 || m.Predicted < 0 {
				t.Errorf("generation %d %s %s: recorded %s, predicted %s: one side never reached it", c.Generation, m.Stage, m.Mark, m.Recorded, m.Predicted)
			} else if m.Error > simTolerance || m.Error < -simTolerance {
				t.Errorf("generation %d %s %s: predicted +%s, recorded +%s: error %s beyond %s", c.Generation, m.Stage, m.Mark, m.Predicted, m.Recorded, m.Error, simTolerance)
			}
		}
	}
	if v.EndsAgree != 3 || v.Missing != 0 {
		t.Errorf("%d of 3 ends agree, %d marks on one side only", v.EndsAgree, v.Missing)
	}
	t.Logf("generations 2-4: %d marks compared, mean absolute error %s, max %s", v.Compared, v.MeanAbsError, v.MaxAbsError)
	c := v.Revisions[1]
	var stages []string
	for _, m := range c.Marks {
		stages = append(stages, m.Stage+" "+m.Mark)
	}
	want := []string{"rollout start", "canary start", "canary end succeeded", "batch 1 start", "batch 1 end succeeded", "batch 2 start",
		"batch 2 end succeeded", "rollout end succeeded"}
	if diff := cmp.Diff(want, stages); diff != "" {
		t.Errorf("stage marks (-want +got):\n%s", diff)
	}
	if c.RecordedEnd != "Succeeded" || c.PredictedEnd != "Succeeded" || c.Prediction.Failed != 1 || c.Prediction.Handed != 6 {
		t.Errorf("gen 2: recorded %s, predicted %s with %d failed of %d handed; want Succeeded both, d6 failed, 6 handed",
			c.RecordedEnd, c.PredictedEnd, c.Prediction.Failed, c.Prediction.Handed)
	}
	if c.Prediction.Model.Own != 6 {
		t.Errorf("model %+v: every target has its own sample from generation 1", c.Prediction.Model)
	}

	t.Run("a backup restored into a fresh server gives the same validation", func(t *testing.T) {
		restored, err := history.New(history.Options{Reader: restoreBackup(t, f.ctx, f.store.JetStream().Conn().ConnectedUrl())})
		if err != nil {
			t.Fatal(err)
		}
		got, err := restored.SimulateRecorded(context.Background(), "lab", "api", history.SimulateOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(v, got); diff != "" {
			t.Errorf("(-original +restored):\n%s", diff)
		}
	})
	t.Run("the same seed gives the same prediction", func(t *testing.T) {
		again, err := h.SimulateRecorded(context.Background(), "lab", "api", history.SimulateOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(v.Revisions[1].Prediction.Stages, again.Revisions[1].Prediction.Stages); diff != "" {
			t.Errorf("(-first +second):\n%s", diff)
		}
	})
}

// TestTheSimulatorsErrorOverALongerRecordedHistory records eight rollouts
// of 20 devices with the operator's rollout runner — without a plan, with
// count and percent batches and soaks, with manual approvals — where d20
// always fails and d19 fails every other generation, then checks the
// simulations of generations 2 to 8 against them: the mean absolute error
// of their stage times within simTolerance. It logs the figures
// docs/history.md states.
func TestTheSimulatorsErrorOverALongerRecordedHistory(t *testing.T) {
	f := startFleet(t)
	var all []string
	for i := 1; i <= 20; i++ {
		all = append(all, fmt.Sprintf("d%02d", i))
	}
	// Batches of the 18 non-canary targets.
	plans := []simPlan{
		{nil, nil},
		{&events.RolloutPlan{Batches: []events.PlanBatch{{Size: 4, SuccessPercent: 100, SoakSeconds: 1}, {Size: 14, SuccessPercent: 80}}}, []int{4, 14}},
		{&events.RolloutPlan{Approval: events.ApprovalManual, Batches: []events.PlanBatch{{Size: 9, SuccessPercent: 100}, {Size: 9, SuccessPercent: 75}}}, []int{9, 9}},
		{&events.RolloutPlan{Batches: []events.PlanBatch{{Size: 2, SuccessPercent: 100}, {Size: 6, SuccessPercent: 100, SoakSeconds: 1}, {Size: 10, SuccessPercent: 80}}}, []int{2, 6, 10}},
	}
	f.recordRollouts(all, plans, 8, func(int64) string { return "registry.example.com/api:v1" }, func(d string, gen int64) bool {
		return d == "d20" || (d == "d19" && gen%2 == 1)
	})
	h, err := history.New(history.Options{Reader: f.store})
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.SimulateRecorded(context.Background(), "lab", "api", history.SimulateOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("generations 2-8: %d stage marks compared, mean absolute error %s, max %s, %d on one side only, %d of %d ends agree",
		v.Compared, v.MeanAbsError, v.MaxAbsError, v.Missing, v.EndsAgree, len(v.Revisions)-v.NoHistory)
	for _, c := range v.Revisions {
		t.Logf("generation %d: recorded %s, predicted %s", c.Generation, c.RecordedEnd, c.PredictedEnd)
	}
	if v.NoHistory != 1 || v.Compared < 40 {
		t.Fatalf("%d revisions without history, %d marks compared: want 1 (generation 1), at least 40", v.NoHistory, v.Compared)
	}
	if v.MeanAbsError > simTolerance {
		t.Errorf("mean absolute error %s beyond %s", v.MeanAbsError, simTolerance)
	}
}

// simPlan is a rollout plan and the sizes of its batches of the
// non-canary targets, in device-id order (nil: no plan).
type simPlan struct {
	plan  *events.RolloutPlan
	sizes []int
}

// recordRollouts runs the operator's rollout runner through generations
// 1 to n of lab/api over devices (the first two the canaries), each with
// the next of plans in turn and the image image(gen), while the test plays
// the agents (in device order; fails says which device fails which
// generation) and approves each batch of a manual plan; each rollout is
// waited for until it succeeded, failed or paused.
func (f *fleetRun) recordRollouts(devices []string, plans []simPlan, n int64, image func(int64) string, fails func(string, int64) bool) {
	f.t.Helper()
	answer := func(rev events.DeploymentRevisionCreated, devices []string) {
		for _, d := range devices {
			f.watchIntent(d, "api", rev.Generation)
			f.agentReport(d, "api", rev.UID, rev.Generation, rev.RevisionID, events.WorkloadApplying, "")
			if fails(d, rev.Generation) {
				f.agentReport(d, "api", rev.UID, rev.Generation, rev.RevisionID, events.WorkloadFailed, "api exited with 1")
				continue
			}
			f.agentReport(d, "api", rev.UID, rev.Generation, rev.RevisionID, events.WorkloadConverged, "")
		}
	}
	canaries := devices[:2]
	for gen := int64(1); gen <= n; gen++ {
		p := plans[(gen-1)%int64(len(plans))]
		var batches []int
		if p.plan != nil {
			batches = append(batches, 0, 0)
			for b, n := range p.sizes {
				for range n {
					batches = append(batches, b+1)
				}
			}
		}
		rev := f.scoredRevision("api", "a1b2c3", gen, image(gen), devices, canaries, p.plan, batches)
		answer(rev, canaries)
		if p.plan == nil {
			answer(rev, devices[2:])
		} else {
			next := 2
			for b, n := range p.sizes {
				if p.plan.Approval == events.ApprovalManual {
					f.approve(rev, b+1)
				}
				answer(rev, devices[next:next+n])
				next += n
			}
		}
		f.waitFor(fmt.Sprintf("generation %d to end", gen), func() bool {
			st, ok := f.statuses.get("lab", "api")
			return ok && st.Revision != nil && st.Revision.Generation == gen &&
				(st.Phase == fleetv1.PhaseSucceeded || st.Phase == fleetv1.PhaseFailed || (st.Plan != nil && st.Plan.Paused))
		})
	}
}

package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// simTolerance is the stated error of a simulated stage time against the
// recorded one, for rollouts whose devices answer as before: the
// operator's and the agents' reaction times on a loaded machine, which the
// simulation replays from the history before the rollout.
const simTolerance = 750 * time.Millisecond

// TestASimulationOfARecordedRolloutsOwnPlanPredictsItsStageTimes runs the
// operator's real rollout runner through a rollout without a plan (d6
// fails) and then one with two soaking batches (d6 fails again, within
// batch 2's threshold) while the test plays the agents, then simulates the
// second rollout's own plan against the history before it and compares
// every stage's start and end with the recorded transitions.
func TestASimulationOfARecordedRolloutsOwnPlanPredictsItsStageTimes(t *testing.T) {
	f := startFleet(t)
	all := []string{"d1", "d2", "d3", "d4", "d5", "d6"}
	answer := func(rev events.DeploymentRevisionCreated, devices ...string) {
		for _, d := range devices {
			f.waitIntent(d, "api", rev.Generation)
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

	h, err := history.New(history.Options{Reader: f.store})
	if err != nil {
		t.Fatal(err)
	}
	v, err := h.SimulateRecorded(context.Background(), "lab", "api", history.SimulateOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Revisions) != 2 {
		t.Fatalf("%d revisions simulated, want 2", len(v.Revisions))
	}
	c := v.Revisions[1]
	var stages []string
	for _, m := range c.Marks {
		stages = append(stages, m.Stage+" "+m.Mark)
		if m.Recorded < 0 || m.Predicted < 0 {
			t.Errorf("%s %s: recorded %s, predicted %s: one side never reached it", m.Stage, m.Mark, m.Recorded, m.Predicted)
			continue
		}
		if m.Error > simTolerance || m.Error < -simTolerance {
			t.Errorf("%s %s: predicted +%s, recorded +%s: error %s beyond %s", m.Stage, m.Mark, m.Predicted, m.Recorded, m.Error, simTolerance)
		}
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
	t.Logf("gen 2: %d marks, mean absolute error %s, max %s", len(c.Marks), v.MeanAbsError, v.MaxAbsError)

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

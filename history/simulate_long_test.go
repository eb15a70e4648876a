package history_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// TestTheSimulatorAgreesWithTheRunnerOverALongHistory records 36
// rollouts of 24 devices with the operator's rollout runner (thousands of
// events: every device reports every revision twice), cycling through
// five plans — none, soaking count batches, manual approvals, three
// batches, one batch that pauses on a failure and is superseded by the
// next revision — and three images, while d24 always fails, d23 fails
// with image v2 and d22 with v1. Then it simulates every recorded rollout's own plan
// against the history before it and checks the simulator against what the
// runner did: the same end for every rollout, every stage on both sides,
// and the stage times within the stated error.
func TestTheSimulatorAgreesWithTheRunnerOverALongHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("records 36 rollouts")
	}
	f := startFleetWithin(t, 20*time.Minute)
	var all []string
	for i := 1; i <= 24; i++ {
		all = append(all, fmt.Sprintf("d%02d", i))
	}
	canaries := all[:2]
	// Each revision runs one of three images; a device's failures follow
	// the image (what the model learns a device's behaviour by).
	image := func(gen int64) string { return fmt.Sprintf("registry.example.com/api:v%d", 1+gen%3) }
	fails := func(d string, gen int64) bool {
		img := image(gen)
		return d == "d24" || (d == "d23" && strings.HasSuffix(img, ":v2")) || (d == "d22" && strings.HasSuffix(img, ":v1"))
	}
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
	// Batches of the 22 non-canary targets, in device-id order.
	plans := []struct {
		plan  *events.RolloutPlan
		sizes []int
	}{
		{nil, nil},
		{&events.RolloutPlan{Batches: []events.PlanBatch{{Size: 4, SuccessPercent: 100, SoakSeconds: 1}, {Size: 18, SuccessPercent: 80}}}, []int{4, 18}},
		{&events.RolloutPlan{Approval: events.ApprovalManual, Batches: []events.PlanBatch{{Size: 11, SuccessPercent: 100}, {Size: 11, SuccessPercent: 75}}}, []int{11, 11}},
		{&events.RolloutPlan{Batches: []events.PlanBatch{{Size: 2, SuccessPercent: 100}, {Size: 8, SuccessPercent: 100, SoakSeconds: 1}, {Size: 12, SuccessPercent: 80}}}, []int{2, 8, 12}},
		{&events.RolloutPlan{OnFailure: events.OnFailurePause, Batches: []events.PlanBatch{{Size: 22, SuccessPercent: 100}}}, []int{22}},
	}
	const revisions = 36
	for gen := int64(1); gen <= revisions; gen++ {
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
		rev := f.scoredRevision("api", "a1b2c3", gen, image(gen), all, canaries, p.plan, batches)
		answer(rev, canaries)
		if p.plan == nil {
			answer(rev, all[2:])
		} else {
			next := 2
			for b, n := range p.sizes {
				if p.plan.Approval == events.ApprovalManual {
					f.approve(rev, b+1)
				}
				answer(rev, all[next:next+n])
				next += n
			}
		}
		f.waitFor(fmt.Sprintf("generation %d to end", gen), func() bool {
			st, ok := f.statuses.get("lab", "api")
			return ok && st.Revision != nil && st.Revision.Generation == gen &&
				(st.Phase == fleetv1.PhaseSucceeded || st.Phase == fleetv1.PhaseFailed || (st.Plan != nil && st.Plan.Paused))
		})
	}
	h, err := history.New(history.Options{Reader: f.store})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	v, err := h.SimulateRecorded(context.Background(), "lab", "api", history.SimulateOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("simulated %d recorded rollouts in %s", len(v.Revisions), time.Since(start).Round(time.Millisecond))
	t.Logf("generations 2-%d: %d stage marks compared, mean absolute error %s, max %s, %d on one side only, %d of %d ends agree",
		revisions, v.Compared, v.MeanAbsError, v.MaxAbsError, v.Missing, v.EndsAgree, len(v.Revisions)-v.NoHistory)
	if len(v.Revisions) != revisions || v.NoHistory != 1 {
		t.Fatalf("%d revisions simulated, %d without history; want %d, 1 (generation 1)", len(v.Revisions), v.NoHistory, revisions)
	}
	// Generations 1 to 3 each run an image for the first time: a device
	// that fails by image has no sample of it yet, and the model draws from
	// its other images. From generation 4 on, every device has answered
	// every image.
	for _, c := range v.Revisions[3:] {
		if c.RecordedEnd != c.PredictedEnd {
			t.Errorf("generation %d: the runner ended %s, the simulator predicts %s", c.Generation, c.RecordedEnd, c.PredictedEnd)
			for _, st := range c.Prediction.Steps {
				t.Logf("  predicted +%s %s batch %d device %s %+v", st.Offset, st.Type, st.Batch, st.Device, st.Counts)
			}
		}
		for _, m := range c.Marks {
			if m.Recorded < 0 || m.Predicted < 0 {
				t.Errorf("generation %d %s %s: recorded %s, predicted %s: one side never reached it", c.Generation, m.Stage, m.Mark, m.Recorded, m.Predicted)
			}
		}
	}
	if v.MeanAbsError > simTolerance {
		t.Errorf("mean absolute error %s beyond %s", v.MeanAbsError, simTolerance)
	}
}

package history_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
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
	// Each revision runs one of three images; a device's failures follow
	// the image (what the model learns a device's behaviour by).
	image := func(gen int64) string { return fmt.Sprintf("registry.example.com/api:v%d", 1+gen%3) }
	fails := func(d string, gen int64) bool {
		img := image(gen)
		return d == "d24" || (d == "d23" && strings.HasSuffix(img, ":v2")) || (d == "d22" && strings.HasSuffix(img, ":v1"))
	}
	// Batches of the 22 non-canary targets.
	plans := []simPlan{
		{nil, nil},
		{&events.RolloutPlan{Batches: []events.PlanBatch{{Size: 4, SuccessPercent: 100, SoakSeconds: 1}, {Size: 18, SuccessPercent: 80}}}, []int{4, 18}},
		{&events.RolloutPlan{Approval: events.ApprovalManual, Batches: []events.PlanBatch{{Size: 11, SuccessPercent: 100}, {Size: 11, SuccessPercent: 75}}}, []int{11, 11}},
		{&events.RolloutPlan{Batches: []events.PlanBatch{{Size: 2, SuccessPercent: 100}, {Size: 8, SuccessPercent: 100, SoakSeconds: 1}, {Size: 12, SuccessPercent: 80}}}, []int{2, 8, 12}},
		{&events.RolloutPlan{OnFailure: events.OnFailurePause, Batches: []events.PlanBatch{{Size: 22, SuccessPercent: 100}}}, []int{22}},
	}
	const revisions = 36
	f.recordRollouts(all, plans, revisions, image, fails)
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

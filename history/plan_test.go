package history

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// TestAPlannedRolloutsBatchesApprovalsAndPausesAreInItsTimeline stores a
// rollout with a plan (ADR 0016) and reads its timeline: every batch
// start, success and failure, the approval and the pause with who asked.
func TestAPlannedRolloutsBatchesApprovalsAndPausesAreInItsTimeline(t *testing.T) {
	_, st := natstest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := streamWriter{tb: t, ctx: ctx, st: st}
	rev := benchRevision("p", 1, []string{"d1", "d2", "d3"}, nil)
	rev.Plan = &events.RolloutPlan{Approval: events.ApprovalManual, OnFailure: events.OnFailurePause,
		Batches: []events.PlanBatch{{Size: 1, SuccessPercent: 100}, {Size: 2, SuccessPercent: 100}}}
	rev.TargetBatches = []int{1, 2, 2}
	w.revision("lab", "p", rev, 0)
	tr := func(typ events.Type, d events.RolloutTransition) {
		d.UID, d.Generation, d.RevisionID = rev.UID, rev.Generation, rev.RevisionID
		w.append(events.Keys{Namespace: "lab", Name: "p"}, events.NewRolloutTransition(typ, d), rev.UID, rev.Generation)
	}
	tr(events.TypeRolloutStarted, events.RolloutTransition{})
	tr(events.TypeRolloutAwaitingApproval, events.RolloutTransition{Batch: 1})
	tr(events.TypeRolloutApproved, events.RolloutTransition{Batch: 1, By: "ana", Request: "r1"})
	tr(events.TypeRolloutBatchStarted, events.RolloutTransition{Batch: 1, Released: []string{"d1"}})
	tr(events.TypeRolloutBatchSucceeded, events.RolloutTransition{Batch: 1})
	tr(events.TypeRolloutPaused, events.RolloutTransition{By: "bo", Request: "r2"})
	tr(events.TypeRolloutResumed, events.RolloutTransition{By: "bo", Request: "r3"})
	tr(events.TypeRolloutApproved, events.RolloutTransition{Batch: 2, By: "ana", Request: "r4"})
	tr(events.TypeRolloutBatchStarted, events.RolloutTransition{Batch: 2})
	tr(events.TypeRolloutBatchFailed, events.RolloutTransition{Batch: 2, Device: "d3", Error: "batch 2: 1 of 2 failed"})
	tr(events.TypeRolloutPaused, events.RolloutTransition{Device: "d3", Error: "batch 2: 1 of 2 failed"})
	tr(events.TypeRolloutRolledBack, events.RolloutTransition{RollbackTo: 3, Released: []string{"d1", "d2", "d3"}, Device: "d3", Error: "batch 2: 1 of 2 failed"})

	h, err := New(Options{Reader: st})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := h.Deployment(ctx, "lab", "p")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range tl.Entries {
		got = append(got, e.Summary)
	}
	for _, want := range []string{
		"batch 1 awaits approval [0/0 succeeded, 0 failed, 0 pending]",
		"batch 1 approved by ana [0/0 succeeded, 0 failed, 0 pending]",
		"batch 1 started: released to [d1] [0/0 succeeded, 0 failed, 0 pending]",
		"batch 1 succeeded [0/0 succeeded, 0 failed, 0 pending]",
		"paused by bo [0/0 succeeded, 0 failed, 0 pending]",
		"resumed by bo [0/0 succeeded, 0 failed, 0 pending]",
		"batch 2 started (its devices are in the revision's plan) [0/0 succeeded, 0 failed, 0 pending]",
		"batch 2 failed: batch 2: 1 of 2 failed [0/0 succeeded, 0 failed, 0 pending]",
		"paused: batch 2: 1 of 2 failed [0/0 succeeded, 0 failed, 0 pending]",
		"rolled back to generation 3 on [d1 d2 d3]: batch 2: 1 of 2 failed [0/0 succeeded, 0 failed, 0 pending]",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("the timeline has no entry %q; it has:\n%q", want, got)
		}
	}
}

package projections_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// selectorFollow is a Follow revision with a plan of a selector batch
// (site=paris: a) and the leftovers (b, site lyon), and a disruption
// budget of one device per site.
func selectorFollow(t *testing.T) (ro *projections.Rollout, in *projections.Intent, step func(evs ...events.Event), log *[]events.Event) {
	t.Helper()
	plan := &events.RolloutPlan{Batches: []events.PlanBatch{
		{Size: 1, SuccessPercent: 100, Selector: map[string]string{"site": "paris"}},
		{Size: 1, SuccessPercent: 100}},
		Budget: &events.DisruptionBudget{LabelKey: "site", MaxUnavailable: 1, Values: []string{"lyon", "paris"}}}
	d := events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "1-abcdef12", ScoreDigest: "sha256:00",
		Score: []byte(`{}`), Targets: []string{"a", "b"}, Canaries: []string{}, Follow: true, Plan: plan,
		TargetBatches: []int{1, 2}, TargetGroups: []int{1, 0}}
	_, ro, in, step, log = planFollowOf(t, d)
	return ro, in, step, log
}

// placedJoin is the rollout.target-added the runner writes for dev with
// labels: the batch and budget group the fold's PlaceFollower chooses.
func placedJoin(t *testing.T, ro *projections.Rollout, dev string, labels map[string]string) events.Event {
	t.Helper()
	d := ro.PlaceFollower(events.RolloutTransition{UID: "u1", Generation: 1, RevisionID: "1-abcdef12", Counts: ro.Counts(),
		Device: dev, Follow: true, Reason: "Device created", Change: "site=" + labels["site"]}, labels)
	return planEvent(t, events.Keys{Namespace: "lab", Name: "api"}, events.NewRolloutTransition(events.TypeRolloutTargetAdded, d))
}

// TestAFollowerJoinsTheSelectorBatchItsLabelsMatch (ADR 0026): a follower
// joins the first batch whose frozen selector its labels match, else the
// last batch; joining a batch that ended already, it is handed the
// revision by a budget wave of that batch, during the rollout and after
// its end. A budget value the frozen plan does not know (nantes) is a
// group of its own with the budget's allowance, not the group of the
// devices without the label. The fold gives the same values and status in
// another order of the streams and through a snapshot after every event.
func TestAFollowerJoinsTheSelectorBatchItsLabelsMatch(t *testing.T) {
	ro, in, step, all := selectorFollow(t)
	step()
	step(planReport(t, "a"))
	if ro.Batch != 2 || !slices.Equal(ro.Released(), []string{"a", "b"}) {
		t.Fatalf("batch %d, released %v: want batch 2 started, a and b handed", ro.Batch, ro.Released())
	}
	step(placedJoin(t, ro, "x", map[string]string{"site": "paris", "role": "api"}))
	if ro.BatchOf("x") != 1 {
		t.Errorf("x in batch %d, want 1: its labels match batch 1's selector site=paris", ro.BatchOf("x"))
	}
	if _, ok := in.Value("x"); !ok || !slices.Contains(ro.Released(), "x") {
		t.Errorf("x handed %v, released %v: want x handed by a wave of its batch, which ended already", ok, ro.Released())
	}
	step(placedJoin(t, ro, "y", map[string]string{"role": "api"}))
	if ro.BatchOf("y") != 2 || !slices.Contains(ro.Released(), "y") {
		t.Errorf("y in batch %d, released %v: want the last batch, handed (its group has room)", ro.BatchOf("y"), ro.Released())
	}
	nantes := placedJoin(t, ro, "z", map[string]string{"site": "nantes"})
	if d, _ := events.Decode[events.RolloutTransition](nantes); d.BudgetGroup != "nantes" || d.Batch != 2 {
		t.Errorf("z's event: batch %d, budget group %q; want 2 and nantes", d.Batch, d.BudgetGroup)
	}
	step(nantes)
	if _, ok := in.Value("z"); !ok {
		t.Errorf("z (site nantes, unknown to the plan) not handed: it waits for y, counted with the devices without the label; released %v", ro.Released())
	}
	step(placedJoin(t, ro, "w", map[string]string{"site": "nantes"}))
	if _, ok := in.Value("w"); ok {
		t.Error("w handed the revision while z, of the same new group nantes, is in flight: one device per site")
	}
	for _, dev := range []string{"b", "x", "y", "z"} {
		step(planReport(t, dev))
	}
	if _, ok := in.Value("w"); !ok {
		t.Errorf("w not handed once z converged; released %v", ro.Released())
	}
	step(planReport(t, "w"))
	if ro.Stage != projections.StageSucceeded {
		t.Fatalf("stage %s, want Succeeded", ro.Stage)
	}
	// After the end, a newcomer of the first batch is handed it too.
	step(placedJoin(t, ro, "v", map[string]string{"site": "paris"}))
	if _, ok := in.Value("v"); !ok || ro.BatchOf("v") != 1 || ro.Stage != projections.StageSucceeded {
		t.Errorf("v handed %v in batch %d, stage %s: want handed, batch 1, still Succeeded", ok, ro.BatchOf("v"), ro.Stage)
	}
	rebuiltSame(t, *all, ro, in)
}

// TestAFollowerNeverHandedAFailedRevisionHoldsTheLastThatSucceeded (ADR
// 0026): x joined generation 2 during its canary stage and was never
// handed it when the canary failed; the runner's follow-up
// rollout.target-added hands it generation 1, the last that succeeded:
// it then holds generation 1, is listed with it and counts in none of
// generation 2's counts, whatever the order of the streams and through a
// snapshot after every event.
func TestAFollowerNeverHandedAFailedRevisionHoldsTheLastThatSucceeded(t *testing.T) {
	dep := events.Keys{Namespace: "lab", Name: "api"}
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	n := 0
	mk := func(keys events.Keys, d events.Data, gen int64) events.Event {
		t.Helper()
		n++
		ev, err := events.New(keys, d, events.WithTime(at.Add(time.Duration(n)*time.Second)), events.WithCorrelation("u1", gen))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	revID := map[int64]string{1: "1-aaaaaaaa", 2: "2-bbbbbbbb"}
	var revs, rollout, reports []events.Event
	live := &projections.Rollout{}
	tr := func(gen int64, typ events.Type, d events.RolloutTransition) {
		d.UID, d.Generation, d.RevisionID = "u1", gen, revID[gen]
		ev := mk(dep, events.NewRolloutTransition(typ, d), gen)
		rollout = append(rollout, ev)
		live.Fold(ev)
	}
	report := func(gen int64, dev string, phase events.WorkloadPhase) {
		ev := mk(events.Keys{Device: dev}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: gen,
			RevisionID: revID[gen], Phase: phase, Since: at}, gen)
		reports = append(reports, ev)
		live.Fold(ev)
	}
	rev := func(gen int64, targets, canaries []string) {
		ev := mk(dep, events.DeploymentRevisionCreated{UID: "u1", Generation: gen, RevisionID: revID[gen],
			ScoreDigest: "sha256:0" + revID[gen][:1], Score: []byte(`{}`), Targets: targets, Canaries: canaries, Follow: true}, gen)
		revs = append(revs, ev)
		live.Fold(ev)
	}
	rev(1, []string{"a", "b"}, []string{})
	tr(1, events.TypeRolloutStarted, events.RolloutTransition{})
	tr(1, events.TypeRolloutReleased, events.RolloutTransition{Released: []string{"a", "b"}})
	report(1, "a", events.WorkloadConverged)
	report(1, "b", events.WorkloadConverged)
	tr(1, events.TypeRolloutSucceeded, events.RolloutTransition{})
	rev(2, []string{"a", "b"}, []string{"a"})
	tr(2, events.TypeRolloutStarted, events.RolloutTransition{})
	tr(2, events.TypeRolloutCanaryStage, events.RolloutTransition{Released: []string{"a"}})
	tr(2, events.TypeRolloutTargetAdded, events.RolloutTransition{Device: "x", Follow: true, Reason: "Device created", Change: "role=api"})
	report(2, "a", events.WorkloadFailed)
	tr(2, events.TypeRolloutCanaryFailed, events.RolloutTransition{Device: "a", Error: "image pull failed"})
	tr(2, events.TypeRolloutFailed, events.RolloutTransition{Device: "a", Error: "image pull failed"})
	if got := live.UnhandedFollowers(); !slices.Equal(got, []string{"x"}) {
		t.Errorf("followers never handed the failed revision: %v, want [x]", got)
	}
	tr(2, events.TypeRolloutTargetAdded, events.RolloutTransition{Device: "x", Follow: true, Reason: projections.ReasonFailedBeforeHanded,
		HandedGeneration: 1, HandedRevisionID: revID[1]})
	if got := live.UnhandedFollowers(); len(got) != 0 {
		t.Errorf("followers never handed the failed revision after the follow-up: %v, want none", got)
	}
	report(1, "x", events.WorkloadConverged)

	byTime := append(append(append([]events.Event{}, revs...), rollout...), reports...)
	sortByTime(byTime)
	wantRo, wantIn := foldFollow(t, byTime, false)
	if !wantIn.Holds("x", "lab", "api", "u1", 1) || !wantIn.Holds("b", "lab", "api", "u1", 1) || !wantIn.Holds("a", "lab", "api", "u1", 2) {
		t.Errorf("x holds generation 1: %v, b: %v, a holds 2: %v; want all three", wantIn.Holds("x", "lab", "api", "u1", 1),
			wantIn.Holds("b", "lab", "api", "u1", 1), wantIn.Holds("a", "lab", "api", "u1", 2))
	}
	wantStatus, _ := wantRo.Status()
	if c := wantStatus.Counts; c.Total != 2 || c.Failed != 1 || c.Followers != 0 {
		t.Errorf("counts %+v, want 2 frozen targets, 1 failed, no follower of generation 2", c)
	}
	if len(wantStatus.Followers) != 1 || wantStatus.Followers[0].Device != "x" || wantStatus.Followers[0].Revision == nil ||
		wantStatus.Followers[0].Revision.Generation != 1 || wantStatus.Followers[0].Reason != "Device created" {
		t.Errorf("followers %+v, want x (Device created) with generation 1", wantStatus.Followers)
	}
	for _, o := range []struct {
		name   string
		evs    []events.Event
		resume bool
	}{
		{"the revisions first, then the transitions, then the reports", append(append(append([]events.Event{}, revs...), rollout...), reports...), false},
		{"the reports first, then the transitions, then the revisions", append(append(append([]events.Event{}, reports...), rollout...), revs...), false},
		{"the transitions before the revisions, resumed from a snapshot after every event", append(append(append([]events.Event{}, rollout...), revs...), reports...), true},
		{"in the order they happened, resumed from a snapshot after every event", byTime, true},
	} {
		t.Run(o.name, func(t *testing.T) {
			ro, in := foldFollow(t, o.evs, o.resume)
			for _, dev := range []string{"a", "b", "x"} {
				want, _ := wantIn.Value(dev)
				got, _ := in.Value(dev)
				if diff := cmp.Diff(string(want), string(got)); diff != "" {
					t.Errorf("value of %s (-want +got):\n%s", dev, diff)
				}
			}
			st, _ := ro.Status()
			if diff := cmp.Diff(wantStatus, st); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWithoutABudgetAFollowerOfAnEndedSelectorBatchIsHandedItAtOnce: no
// budget, manual approval: a follower of the selector batch that ended is
// handed the revision by its own rollout.target-added while batch 2 waits
// for approval; one of the running selector batch counts in its
// threshold; one that matches no selector waits for the last batch.
func TestWithoutABudgetAFollowerOfAnEndedSelectorBatchIsHandedItAtOnce(t *testing.T) {
	plan := &events.RolloutPlan{Batches: []events.PlanBatch{
		{Size: 1, SuccessPercent: 100, Selector: map[string]string{"site": "paris"}},
		{Size: 1, SuccessPercent: 100}}, Approval: events.ApprovalManual}
	_, ro, in, step, all := planFollowOf(t, events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "1-abcdef12",
		ScoreDigest: "sha256:00", Score: []byte(`{}`), Targets: []string{"a", "b"}, Canaries: []string{}, Follow: true, Plan: plan,
		TargetBatches: []int{1, 2}})
	step()
	step(planApprove(t, 1))
	step(placedJoin(t, ro, "w", map[string]string{"site": "paris"}))
	step(planReport(t, "a"))
	if ro.BatchOf("w") != 1 || ro.AwaitingApproval == 2 {
		t.Fatalf("w in batch %d, awaiting %d: want w in the running batch 1, which waits for w to converge", ro.BatchOf("w"), ro.AwaitingApproval)
	}
	step(planReport(t, "w"))
	if ro.AwaitingApproval != 2 {
		t.Fatalf("awaiting %d, want batch 2 once a and w converged", ro.AwaitingApproval)
	}
	step(placedJoin(t, ro, "x", map[string]string{"site": "paris"}))
	step(placedJoin(t, ro, "y", map[string]string{"site": "lyon"}))
	if _, ok := in.Value("x"); !ok || ro.BatchOf("x") != 1 {
		t.Errorf("x handed %v in batch %d: want handed at once, batch 1", ok, ro.BatchOf("x"))
	}
	if _, ok := in.Value("y"); ok || ro.BatchOf("y") != 2 {
		t.Errorf("y handed %v in batch %d: want batch 2, waiting for its approval", ok, ro.BatchOf("y"))
	}
	rebuiltSame(t, *all, ro, in)
}

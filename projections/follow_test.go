package projections_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// followStory is a Follow revision's history (ADR 0026) on its two
// subjects: the intent (the revision) and the rollout (transitions), plus
// the reports. Frozen targets a (canary) and b; x joins during the canary
// stage and waits for the release, y joins after the release, b leaves
// (relabelled), x leaves (quarantined) after it converged, and z joins and
// is timed out (a removal without follow: it keeps the revision).
func followStory(t *testing.T) (revision events.Event, rollout, reports []events.Event) {
	t.Helper()
	dep := events.Keys{Namespace: "lab", Name: "api"}
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	n := 0
	mk := func(keys events.Keys, d events.Data) events.Event {
		t.Helper()
		n++
		ev, err := events.New(keys, d, events.WithTime(at.Add(time.Duration(n)*time.Second)), events.WithCorrelation("u1", 1))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	tr := func(typ events.Type, d events.RolloutTransition) {
		d.UID, d.Generation, d.RevisionID = "u1", 1, "1-abcdef12"
		rollout = append(rollout, mk(dep, events.NewRolloutTransition(typ, d)))
	}
	report := func(dev string, phase events.WorkloadPhase) {
		reports = append(reports, mk(events.Keys{Device: dev}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1,
			RevisionID: "1-abcdef12", Phase: phase, Since: at}))
	}
	revision = mk(dep, events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "1-abcdef12", ScoreDigest: "sha256:00",
		Score: []byte(`{}`), Targets: []string{"a", "b"}, Canaries: []string{"a"}, Follow: true})
	tr(events.TypeRolloutStarted, events.RolloutTransition{})
	tr(events.TypeRolloutCanaryStage, events.RolloutTransition{Released: []string{"a"}})
	tr(events.TypeRolloutTargetAdded, events.RolloutTransition{Device: "x", Follow: true, Reason: "Device created", Change: "role=api"})
	report("a", events.WorkloadConverged)
	tr(events.TypeRolloutCanariesConverged, events.RolloutTransition{})
	tr(events.TypeRolloutReleased, events.RolloutTransition{Released: []string{"b", "x"}})
	tr(events.TypeRolloutTargetAdded, events.RolloutTransition{Device: "y", Follow: true, Reason: "labels changed", Change: "role=api (was role=web)"})
	report("x", events.WorkloadConverged)
	tr(events.TypeRolloutTargetRemoved, events.RolloutTransition{Device: "b", Follow: true,
		Error: "labels no longer match the target selector: role=web (was role=api)", Change: "role=web (was role=api)"})
	tr(events.TypeRolloutTargetRemoved, events.RolloutTransition{Device: "x", Follow: true, Error: "Device quarantined", Change: "blacklist=true"})
	tr(events.TypeRolloutTargetAdded, events.RolloutTransition{Device: "z", Follow: true, Reason: "quarantine lifted", Change: "blacklist removed"})
	tr(events.TypeRolloutTargetRemoved, events.RolloutTransition{Device: "z", Error: "no result (Converged or Failed) within the target timeout (1h0m0s) of being handed the revision"})
	report("y", events.WorkloadConverged)
	return revision, rollout, reports
}

// foldFollow folds evs into a rollout and an intent, snapshotting and
// restoring both after every event when resume is set.
func foldFollow(t *testing.T, evs []events.Event, resume bool) (projections.Rollout, *projections.Intent) {
	t.Helper()
	var ro projections.Rollout
	in := projections.NewIntent()
	for _, ev := range evs {
		if ev.Type != events.TypeWorkloadStatus {
			in.Apply(ev)
		}
		ro.Fold(ev)
		if !resume {
			continue
		}
		b, err := json.Marshal(ro)
		if err != nil {
			t.Fatal(err)
		}
		ro = projections.Rollout{}
		if err := json.Unmarshal(b, &ro); err != nil {
			t.Fatal(err)
		}
		b, err = json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		in = projections.NewIntent()
		if err := json.Unmarshal(b, in); err != nil {
			t.Fatal(err)
		}
	}
	return ro, in
}

// TestAFollowRevisionFoldsToTheSameStateWhateverTheOrderOfItsStreams:
// followers join, wait for the release, leave and lose the revision (a
// follow removal) or keep it (a timeout), and the fold of the three
// streams gives the same values and status whether the revision comes
// first (live), after every transition and report (a rebuild reading the
// streams side by side), or through a snapshot after every event.
func TestAFollowRevisionFoldsToTheSameStateWhateverTheOrderOfItsStreams(t *testing.T) {
	rev, rollout, reports := followStory(t)
	live := append(append([]events.Event{rev}, rollout...), reports...)
	// The order the live runner sees: by time (the stories' events are
	// stamped in the order they happened).
	byTime := append([]events.Event{rev}, rollout...)
	byTime = append(byTime, reports...)
	sortByTime(byTime)
	orders := []struct {
		name   string
		evs    []events.Event
		resume bool
	}{
		{"in the order they happened", byTime, false},
		{"the revision first, then the transitions, then the reports", live, false},
		{"the reports first, then the transitions, then the revision", append(append(append([]events.Event{}, reports...), rollout...), rev), false},
		{"the transitions before the revision, resumed from a snapshot after every event", append(append(append([]events.Event{}, rollout...), rev), reports...), true},
		{"in the order they happened, resumed from a snapshot after every event", byTime, true},
	}
	wantRo, wantIn := foldFollow(t, byTime, false)
	wantDevices := []string{"a", "y", "z"}
	if diff := cmp.Diff(wantDevices, wantIn.Devices()); diff != "" {
		t.Errorf("devices with a value (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a", "y"}, wantRo.Targets); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	wantStatus, _ := wantRo.Status()
	if c := wantStatus.Counts; c.Total != 2 || c.Succeeded != 2 || c.Followers != 1 || c.Removed != 3 {
		t.Errorf("counts %+v, want 2 of 2 succeeded, 1 follower, 3 removed", c)
	}
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			ro, in := foldFollow(t, o.evs, o.resume)
			for _, dev := range wantDevices {
				want, _ := wantIn.Value(dev)
				got, _ := in.Value(dev)
				if diff := cmp.Diff(string(want), string(got)); diff != "" {
					t.Errorf("value of %s (-want +got):\n%s", dev, diff)
				}
			}
			if diff := cmp.Diff(wantIn.Devices(), in.Devices()); diff != "" {
				t.Errorf("devices (-want +got):\n%s", diff)
			}
			st, _ := ro.Status()
			if diff := cmp.Diff(wantStatus, st); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAFollowerWaitsForTheReleaseAndNeverJoinsTheCanaries: a device that
// joins during the canary stage is handed nothing until the release, and
// the release the state machine decides lists it.
func TestAFollowerWaitsForTheReleaseAndNeverJoinsTheCanaries(t *testing.T) {
	rev, rollout, _ := followStory(t)
	// Up to x's join: started, canary-stage, target-added x.
	ro, in := foldFollow(t, append([]events.Event{rev}, rollout[:3]...), false)
	if _, ok := in.Value("x"); ok {
		t.Error("x was handed the revision during the canary stage")
	}
	if ro.IsCanary("x") || !ro.IsTarget("x") {
		t.Errorf("x canary %v target %v, want a target that is no canary", ro.IsCanary("x"), ro.IsTarget("x"))
	}
	ro.Fold(mustNewReport(t, "a"))
	next := ro.Next()
	if len(next) != 2 || next[1].EventType() != events.TypeRolloutReleased {
		t.Fatalf("next %v, want canaries-converged, released", next)
	}
	if diff := cmp.Diff([]string{"b", "x"}, next[1].Released); diff != "" {
		t.Errorf("released (-want +got):\n%s", diff)
	}
}

func mustNewReport(t *testing.T, dev string) events.Event {
	t.Helper()
	ev, err := events.New(events.Keys{Device: dev}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1,
		RevisionID: "1-abcdef12", Phase: events.WorkloadConverged})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func sortByTime(evs []events.Event) {
	for i := 1; i < len(evs); i++ {
		for j := i; j > 0 && evs[j].Time.Before(evs[j-1].Time); j-- {
			evs[j], evs[j-1] = evs[j-1], evs[j]
		}
	}
}

// handedStory is a Follow Deployment whose generation 1 succeeded and
// whose generation 2 failed (ADR 0026): x and y join after the failure
// and are handed generation 1; y leaves; a is the frozen target of both.
func handedStory(t *testing.T) (revisions, rollout, reports []events.Event) {
	t.Helper()
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
	tr := func(gen int64, typ events.Type, d events.RolloutTransition) {
		d.UID, d.Generation, d.RevisionID = "u1", gen, revID[gen]
		rollout = append(rollout, mk(dep, events.NewRolloutTransition(typ, d), gen))
	}
	report := func(gen int64, dev string, phase events.WorkloadPhase) {
		reports = append(reports, mk(events.Keys{Device: dev}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: gen,
			RevisionID: revID[gen], Phase: phase, Since: at}, gen))
	}
	for gen := int64(1); gen <= 2; gen++ {
		revisions = append(revisions, mk(dep, events.DeploymentRevisionCreated{UID: "u1", Generation: gen, RevisionID: revID[gen],
			ScoreDigest: "sha256:0" + revID[gen][:1], Score: []byte(`{}`), Targets: []string{"a"}, Canaries: []string{}, Follow: true}, gen))
		tr(gen, events.TypeRolloutStarted, events.RolloutTransition{})
		tr(gen, events.TypeRolloutReleased, events.RolloutTransition{Released: []string{"a"}})
		if gen == 1 {
			report(1, "a", events.WorkloadConverged)
			tr(1, events.TypeRolloutSucceeded, events.RolloutTransition{})
			continue
		}
		report(2, "a", events.WorkloadFailed)
		tr(2, events.TypeRolloutFailed, events.RolloutTransition{Device: "a", Error: "image pull failed"})
	}
	handed := events.RolloutTransition{Follow: true, HandedGeneration: 1, HandedRevisionID: revID[1]}
	x, y := handed, handed
	x.Device, x.Reason, x.Change = "x", "Device created", "role=api"
	y.Device, y.Reason, y.Change = "y", "labels changed", "role=api (was role=web)"
	tr(2, events.TypeRolloutTargetAdded, x)
	report(1, "x", events.WorkloadConverged)
	tr(2, events.TypeRolloutTargetAdded, y)
	tr(2, events.TypeRolloutTargetRemoved, events.RolloutTransition{Device: "y", Follow: true,
		Error: "labels no longer match the target selector: role=web (was role=api)", Change: "role=web (was role=api)"})
	return revisions, rollout, reports
}

// TestAFollowerOfAFailedRevisionHoldsTheLastThatSucceeded: a device that
// joins a Follow revision whose rollout failed holds the Deployment's last
// revision that succeeded (the one its rollout.target-added names), is
// listed among the followers with it and counts in none of the failed
// revision's counts; one that leaves holds nothing. The fold gives the
// same values and status whatever the order of the streams, and through a
// snapshot after every event.
func TestAFollowerOfAFailedRevisionHoldsTheLastThatSucceeded(t *testing.T) {
	revs, rollout, reports := handedStory(t)
	byTime := append(append(append([]events.Event{}, revs...), rollout...), reports...)
	sortByTime(byTime)
	orders := []struct {
		name   string
		evs    []events.Event
		resume bool
	}{
		{"in the order they happened", byTime, false},
		{"the revisions first, then the transitions, then the reports", append(append(append([]events.Event{}, revs...), rollout...), reports...), false},
		{"the reports first, then the transitions, then the revisions", append(append(append([]events.Event{}, reports...), rollout...), revs...), false},
		{"the transitions before the revisions, resumed from a snapshot after every event", append(append(append([]events.Event{}, rollout...), revs...), reports...), true},
		{"in the order they happened, resumed from a snapshot after every event", byTime, true},
	}
	wantRo, wantIn := foldFollow(t, byTime, false)
	if diff := cmp.Diff([]string{"a", "x"}, wantIn.Devices()); diff != "" {
		t.Errorf("devices with a value (-want +got):\n%s", diff)
	}
	if !wantIn.Holds("x", "lab", "api", "u1", 1) || !wantIn.Holds("a", "lab", "api", "u1", 2) {
		t.Errorf("x holds generation 1: %v; a holds generation 2: %v; want both", wantIn.Holds("x", "lab", "api", "u1", 1), wantIn.Holds("a", "lab", "api", "u1", 2))
	}
	wantStatus, _ := wantRo.Status()
	if c := wantStatus.Counts; c.Total != 1 || c.Failed != 1 || c.Followers != 0 || c.Removed != 1 {
		t.Errorf("counts %+v, want 1 target failed, no follower of this revision, 1 removed", c)
	}
	if len(wantStatus.Followers) != 1 || wantStatus.Followers[0].Device != "x" || wantStatus.Followers[0].Revision == nil ||
		wantStatus.Followers[0].Revision.Generation != 1 || wantStatus.Followers[0].Revision.ID != "1-aaaaaaaa" {
		t.Errorf("followers %+v, want x with generation 1 (1-aaaaaaaa)", wantStatus.Followers)
	}
	for _, o := range orders {
		t.Run(o.name, func(t *testing.T) {
			ro, in := foldFollow(t, o.evs, o.resume)
			for _, dev := range []string{"a", "x", "y"} {
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

// planFollow is a Follow revision with a plan (ADR 0026): a (batch 1)
// and b (batch 2), both at site lyon, manual approval, a disruption
// budget of one device per site. It returns the revision and a function
// that appends the state machine's decisions until it has none, as the
// runner does, folding each into ro and in.
func planFollow(t *testing.T, budget bool, onFailure ...string) (rev events.Event, ro *projections.Rollout, in *projections.Intent, step func(evs ...events.Event), log *[]events.Event) {
	t.Helper()
	plan := &events.RolloutPlan{Batches: []events.PlanBatch{{Size: 1, SuccessPercent: 100}, {Size: 1, SuccessPercent: 100}},
		Approval: events.ApprovalManual}
	if len(onFailure) > 0 {
		plan.OnFailure = onFailure[0]
	}
	d := events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "1-abcdef12", ScoreDigest: "sha256:00",
		Score: []byte(`{}`), Targets: []string{"a", "b"}, Canaries: []string{}, Follow: true, Plan: plan, TargetBatches: []int{1, 2}}
	if budget {
		plan.Budget = &events.DisruptionBudget{LabelKey: "site", MaxUnavailable: 1, Values: []string{"lyon"}}
		d.TargetGroups = []int{0, 0}
	}
	return planFollowOf(t, d)
}

// planFollowOf is planFollow of the revision d.
func planFollowOf(t *testing.T, d events.DeploymentRevisionCreated) (rev events.Event, ro *projections.Rollout, in *projections.Intent, step func(evs ...events.Event), log *[]events.Event) {
	t.Helper()
	dep := events.Keys{Namespace: "lab", Name: "api"}
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	n := 0
	var all []events.Event
	mk := func(keys events.Keys, d events.Data) events.Event {
		t.Helper()
		n++
		ev, err := events.New(keys, d, events.WithTime(at.Add(time.Duration(n)*time.Second)), events.WithCorrelation("u1", 1))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	rev = mk(dep, d)
	ro, in = &projections.Rollout{}, projections.NewIntent()
	fold := func(ev events.Event) {
		all = append(all, ev)
		if ev.Type != events.TypeWorkloadStatus {
			in.Apply(ev)
		}
		ro.Fold(ev)
	}
	fold(rev)
	step = func(evs ...events.Event) {
		t.Helper()
		for _, ev := range evs {
			fold(ev)
		}
		for range 20 {
			next := ro.NextAt(at.Add(time.Hour))
			if len(next) == 0 {
				return
			}
			for _, tr := range next {
				fold(mk(dep, tr))
			}
		}
		t.Fatal("the state machine never settled")
	}
	return rev, ro, in, step, &all
}

func planEvent(t *testing.T, keys events.Keys, d events.Data) events.Event {
	t.Helper()
	ev, err := events.New(keys, d, events.WithCorrelation("u1", 1))
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func planJoin(t *testing.T, ro *projections.Rollout, dev string, batch int, group string, released bool) events.Event {
	t.Helper()
	d := events.RolloutTransition{UID: "u1", Generation: 1, RevisionID: "1-abcdef12", Counts: ro.Counts(), Device: dev, Follow: true,
		Reason: "Device created", Change: "role=api", Batch: batch, BudgetGroup: group}
	if released {
		d.Released = []string{dev}
	}
	return planEvent(t, events.Keys{Namespace: "lab", Name: "api"}, events.NewRolloutTransition(events.TypeRolloutTargetAdded, d))
}

func planReport(t *testing.T, dev string) events.Event {
	t.Helper()
	return planEvent(t, events.Keys{Device: dev}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1,
		RevisionID: "1-abcdef12", Phase: events.WorkloadConverged})
}

func planApprove(t *testing.T, batch int) events.Event {
	t.Helper()
	return planEvent(t, events.Keys{Namespace: "lab", Name: "api"}, events.NewRolloutTransition(events.TypeRolloutApproved,
		events.RolloutTransition{UID: "u1", Generation: 1, RevisionID: "1-abcdef12", Batch: batch, By: "ada", Request: fmt.Sprint("r", batch)}))
}

// TestAFollowerJoinsItsPlanBatch: a follower of a Follow revision with a
// plan joins the plan's last batch (the batch the writer chose, in its
// rollout.target-added): it waits for that batch and its approval, counts
// in its threshold and, with a disruption budget, in its group's
// allowance, also after the rollout ended. The fold of the whole history
// gives the same values and status in another order of the streams and
// through a snapshot after every event.
func TestAFollowerJoinsItsPlanBatch(t *testing.T) {
	t.Run("it waits for its batch and its approval, then counts in the budget", func(t *testing.T) {
		_, ro, in, step, all := planFollow(t, true)
		step()
		step(planApprove(t, 1))
		if !slices.Equal(ro.Released(), []string{"a"}) {
			t.Fatalf("released %v, want [a]: batch 1 approved", ro.Released())
		}
		step(planJoin(t, ro, "x", 2, "lyon", false))
		if ro.BatchOf("x") != 2 || slices.Contains(ro.Released(), "x") {
			t.Errorf("x in batch %d, released %v: want batch 2, not handed before its batch", ro.BatchOf("x"), ro.Released())
		}
		step(planReport(t, "a"))
		if ro.AwaitingApproval != 2 || slices.Contains(ro.Released(), "x") {
			t.Errorf("awaiting %d, released %v: want batch 2 waiting for approval, x not handed", ro.AwaitingApproval, ro.Released())
		}
		step(planApprove(t, 2))
		// One device of lyon at a time: b (first in id order), then x.
		if got := ro.Released(); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("released %v, want [a b]: x waits for the budget", got)
		}
		step(planReport(t, "b"))
		if got := ro.Released(); !slices.Equal(got, []string{"a", "b", "x"}) {
			t.Errorf("released %v, want [a b x]", got)
		}
		if ro.Stage == projections.StageSucceeded {
			t.Error("the rollout succeeded before its follower converged")
		}
		step(planReport(t, "x"))
		if ro.Stage != projections.StageSucceeded {
			t.Fatalf("stage %s, want Succeeded", ro.Stage)
		}
		// After the end: y is handed the revision at once, z waits for
		// y (one device of lyon at a time).
		step(planJoin(t, ro, "y", 2, "lyon", false))
		step(planJoin(t, ro, "z", 2, "lyon", false))
		if got := ro.Released(); !slices.Equal(got, []string{"a", "b", "x", "y"}) {
			t.Errorf("released %v after the end, want [a b x y]: z waits for the budget", got)
		}
		if _, ok := in.Value("z"); ok {
			t.Error("z was handed the revision over the budget")
		}
		step(planReport(t, "y"))
		if _, ok := in.Value("z"); !ok || ro.Stage != projections.StageSucceeded {
			t.Errorf("z handed %v, stage %s: want z handed once y converged, the rollout still Succeeded", ok, ro.Stage)
		}
		rebuiltSame(t, *all, ro, in)
	})
	t.Run("a follower's failure counts in its batch's threshold: onFailure Pause pauses the rollout", func(t *testing.T) {
		_, ro, in, step, all := planFollow(t, false, events.OnFailurePause)
		step()
		step(planApprove(t, 1))
		step(planReport(t, "a"))
		step(planJoin(t, ro, "x", 2, "", false))
		step(planApprove(t, 2))
		if !slices.Contains(ro.Released(), "x") {
			t.Fatalf("released %v, want x handed with batch 2", ro.Released())
		}
		step(planReport(t, "b"))
		fail := planEvent(t, events.Keys{Device: "x"}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1,
			RevisionID: "1-abcdef12", Phase: events.WorkloadFailed, Error: "crash loop"})
		step(fail)
		if !ro.Paused || ro.Stage == projections.StageSucceeded || !ro.Batches[1].Failed {
			t.Errorf("paused %v, stage %s, batch 2 %+v: want batch 2 failed by the follower and the rollout paused", ro.Paused, ro.Stage, ro.Batches[1])
		}
		rebuiltSame(t, *all, ro, in)
	})
	t.Run("without a budget a follower of a started batch is handed the revision at once", func(t *testing.T) {
		_, ro, in, step, all := planFollow(t, false)
		step()
		step(planApprove(t, 1))
		step(planReport(t, "a"))
		step(planApprove(t, 2))
		step(planReport(t, "b"))
		if ro.Stage != projections.StageSucceeded {
			t.Fatalf("stage %s, want Succeeded", ro.Stage)
		}
		step(planJoin(t, ro, "y", 2, "", true))
		if _, ok := in.Value("y"); !ok || !slices.Contains(ro.Released(), "y") {
			t.Errorf("y handed %v, released %v: want y handed at once", ok, ro.Released())
		}
		rebuiltSame(t, *all, ro, in)
	})
}

// rebuiltSame folds evs with the revision last and the reports first, and
// through a snapshot after every event, and compares with the live folds.
func rebuiltSame(t *testing.T, evs []events.Event, ro *projections.Rollout, in *projections.Intent) {
	t.Helper()
	var revs, rollout, reports []events.Event
	for _, ev := range evs {
		switch {
		case ev.Type == events.TypeDeploymentRevisionCreated:
			revs = append(revs, ev)
		case ev.Type == events.TypeWorkloadStatus:
			reports = append(reports, ev)
		default:
			rollout = append(rollout, ev)
		}
	}
	wantSt, _ := ro.Status()
	for _, o := range []struct {
		name   string
		evs    []events.Event
		resume bool
	}{
		{"the reports first, then the transitions, then the revision", append(append(append([]events.Event{}, reports...), rollout...), revs...), false},
		{"in order, resumed from a snapshot after every event", evs, true},
	} {
		gotRo, gotIn := foldFollow(t, o.evs, o.resume)
		if diff := cmp.Diff(in.Devices(), gotIn.Devices()); diff != "" {
			t.Errorf("%s: devices (-live +rebuilt):\n%s", o.name, diff)
		}
		for _, dev := range in.Devices() {
			want, _ := in.Value(dev)
			got, _ := gotIn.Value(dev)
			if string(want) != string(got) {
				t.Errorf("%s: value of %s differs", o.name, dev)
			}
		}
		st, _ := gotRo.Status()
		if diff := cmp.Diff(wantSt, st); diff != "" {
			t.Errorf("%s: status (-live +rebuilt):\n%s", o.name, diff)
		}
	}
}

// TestARolledBackFollowerHoldsTheGenerationRolledBackTo: a follower
// handed generation 2 (its batch had started) is rolled back with the
// frozen targets to generation 1, which it never held; the intent fold
// gives the same values whatever the order of the streams and through a
// snapshot after every event.
func TestARolledBackFollowerHoldsTheGenerationRolledBackTo(t *testing.T) {
	dep := events.Keys{Namespace: "lab", Name: "api"}
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	n := 0
	mk := func(gen int64, d events.Data) events.Event {
		t.Helper()
		n++
		ev, err := events.New(dep, d, events.WithTime(at.Add(time.Duration(n)*time.Second)), events.WithCorrelation("u1", gen))
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	tr := func(gen int64, typ events.Type, d events.RolloutTransition) events.Event {
		d.UID, d.Generation, d.RevisionID = "u1", gen, fmt.Sprintf("%d-abcdef12", gen)
		return mk(gen, events.NewRolloutTransition(typ, d))
	}
	plan := &events.RolloutPlan{Batches: []events.PlanBatch{{Size: 1, SuccessPercent: 100}}, OnFailure: events.OnFailureRollback}
	revs := []events.Event{
		mk(1, events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "1-abcdef12", ScoreDigest: "sha256:01", Score: []byte(`{}`),
			Targets: []string{"a"}, Canaries: []string{}, Follow: true, Plan: plan, TargetBatches: []int{1}}),
		mk(2, events.DeploymentRevisionCreated{UID: "u1", Generation: 2, RevisionID: "2-abcdef12", ScoreDigest: "sha256:02", Score: []byte(`{}`),
			Targets: []string{"a"}, Canaries: []string{}, Follow: true, Plan: plan, TargetBatches: []int{1}}),
	}
	rollout := []events.Event{
		tr(1, events.TypeRolloutBatchStarted, events.RolloutTransition{Batch: 1, Released: []string{"a"}}),
		tr(1, events.TypeRolloutSucceeded, events.RolloutTransition{}),
		tr(2, events.TypeRolloutBatchStarted, events.RolloutTransition{Batch: 1, Released: []string{"a"}}),
		tr(2, events.TypeRolloutTargetAdded, events.RolloutTransition{Device: "x", Follow: true, Reason: "Device created", Batch: 1, Released: []string{"x"}}),
		tr(2, events.TypeRolloutRolledBack, events.RolloutTransition{RollbackTo: 1, Released: []string{"a", "x"}, Device: "a", Error: "crash loop"}),
		tr(2, events.TypeRolloutFailed, events.RolloutTransition{RollbackTo: 1, Device: "a", Error: "rolled back to generation 1: crash loop"}),
	}
	inOrder := append(append([]events.Event{}, revs...), rollout...)
	sortByTime(inOrder)
	_, want := foldFollow(t, inOrder, false)
	for _, dev := range []string{"a", "x"} {
		if !want.Holds(dev, "lab", "api", "u1", 1) {
			t.Errorf("%s does not hold generation 1 after the rollback", dev)
		}
	}
	for _, o := range []struct {
		name   string
		evs    []events.Event
		resume bool
	}{
		{"the transitions before the revisions", append(append([]events.Event{}, rollout...), revs...), false},
		{"in order, resumed from a snapshot after every event", inOrder, true},
	} {
		t.Run(o.name, func(t *testing.T) {
			_, got := foldFollow(t, o.evs, o.resume)
			for _, dev := range []string{"a", "x"} {
				w, _ := want.Value(dev)
				g, _ := got.Value(dev)
				if diff := cmp.Diff(string(w), string(g)); diff != "" {
					t.Errorf("value of %s (-live +rebuilt):\n%s", dev, diff)
				}
			}
		})
	}
}

package projections_test

import (
	"encoding/json"
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

package projections_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// farFuture is a report time (seconds after t0) from a device clock ten
// years ahead.
const farFuture = 10 * 365 * 24 * 3600

type step struct {
	// exactly one of these
	revision *events.DeploymentRevisionCreated
	report   *report
	// removed is a target the runner removes from the revision's
	// accounting (rollout.target-removed of the current revision).
	removed string
}

func removed(device string) step { return step{removed: device} }

type report struct {
	device string
	gen    int64
	uid    string
	phase  events.WorkloadPhase
	err    string
	at     int // seconds after t0
}

func rev(gen int64, targets, canaries []string) step {
	return step{revision: &events.DeploymentRevisionCreated{UID: "u1", Generation: gen, RevisionID: "r", Score: json.RawMessage(`{}`),
		Targets: targets, Canaries: canaries}}
}

func rep(device string, gen int64, phase events.WorkloadPhase, at int) step {
	return step{report: &report{device: device, gen: gen, uid: "u1", phase: phase, at: at}}
}

func mustNew(t *testing.T, keys events.Keys, d events.Data) events.Event {
	t.Helper()
	ev, err := events.New(keys, d)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// drive folds the steps like the operator does: after every event it appends
// the decided transitions (and folds them back in). It returns the final
// state and the transition types in order.
func drive(t *testing.T, steps []step) (projections.Rollout, []events.Type) {
	t.Helper()
	dep := events.Keys{Namespace: "lab", Name: "api"}
	var r projections.Rollout
	var log []events.Type
	decide := func() {
		for range 10 {
			next := r.Next()
			if len(next) == 0 {
				return
			}
			for _, tr := range next {
				r = r.Apply(mustNew(t, dep, tr))
				log = append(log, tr.EventType())
			}
		}
		t.Fatal("Next never settled")
	}
	for _, s := range steps {
		switch {
		case s.revision != nil:
			r = r.Apply(mustNew(t, dep, *s.revision))
		case s.report != nil:
			p := s.report
			r = r.Apply(mustNew(t, events.Keys{Device: p.device}, events.WorkloadStatus{Namespace: "lab", Deployment: "api",
				UID: p.uid, Generation: p.gen, Phase: p.phase, Error: p.err, Since: t0.Add(time.Duration(p.at) * time.Second)}))
		case s.removed != "":
			r = r.Apply(mustNew(t, dep, events.NewRolloutTransition(events.TypeRolloutTargetRemoved, events.RolloutTransition{
				UID: r.UID, Generation: r.Generation, RevisionID: r.RevisionID, Device: s.removed, Error: "Device deleted"})))
			log = append(log, events.TypeRolloutTargetRemoved)
		}
		decide()
	}
	return r, log
}

func TestRolloutStateMachine(t *testing.T) {
	C, F, A := events.WorkloadConverged, events.WorkloadFailed, events.WorkloadApplying
	tests := []struct {
		name         string
		steps        []step
		wantLog      []events.Type
		wantStage    projections.Stage
		wantReleased []string
	}{
		{"without canaries every target gets the revision at once and success follows the last convergence",
			[]step{rev(1, []string{"a", "b"}, nil), rep("a", 1, C, 1), rep("b", 1, C, 2)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutReleased, events.TypeRolloutSucceeded},
			projections.StageSucceeded, []string{"a", "b"}},
		{"canaries converge before the rest is released",
			[]step{rev(1, []string{"a", "b", "c"}, []string{"a"}), rep("a", 1, C, 1), rep("b", 1, C, 2), rep("c", 1, C, 3)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanariesConverged,
				events.TypeRolloutReleased, events.TypeRolloutSucceeded},
			projections.StageSucceeded, []string{"a", "b", "c"}},
		{"the rest waits while one of two canaries is still applying",
			[]step{rev(1, []string{"a", "b", "c"}, []string{"a", "b"}), rep("a", 1, C, 1), rep("b", 1, A, 2)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage},
			projections.StageCanary, []string{"a", "b"}},
		{"a failed canary fails the rollout and the rest never receives the revision",
			[]step{rev(1, []string{"a", "b", "c"}, []string{"a", "b"}), rep("a", 1, C, 1), rep("b", 1, F, 2)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanaryFailed, events.TypeRolloutFailed},
			projections.StageFailed, []string{"a", "b"}},
		{"a converged canary is not rolled back when another canary fails later",
			[]step{rev(1, []string{"a", "b", "c"}, []string{"a", "b"}), rep("a", 1, C, 1), rep("b", 1, F, 2), rep("c", 1, C, 3)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanaryFailed, events.TypeRolloutFailed},
			projections.StageFailed, []string{"a", "b"}},
		{"a failure after release fails the rollout without taking anything back",
			[]step{rev(1, []string{"a", "b"}, []string{"a"}), rep("a", 1, C, 1), rep("b", 1, F, 2)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanariesConverged,
				events.TypeRolloutReleased, events.TypeRolloutFailed},
			projections.StageFailed, []string{"a", "b"}},
		{"duplicate reports decide nothing twice",
			[]step{rev(1, []string{"a", "b"}, nil), rep("a", 1, C, 1), rep("a", 1, C, 1), rep("b", 1, C, 2), rep("b", 1, C, 2)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutReleased, events.TypeRolloutSucceeded},
			projections.StageSucceeded, []string{"a", "b"}},
		{"a later report in the stream wins even when the device's clock puts it earlier (a clock that jumped back at boot)",
			[]step{rev(1, []string{"a", "b"}, nil), rep("a", 1, C, 5), rep("a", 1, F, 1), rep("b", 1, C, 6)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutReleased, events.TypeRolloutFailed},
			projections.StageFailed, []string{"a", "b"}},
		{"a report from a clock in the far future does not hide the device's later reports",
			[]step{rev(1, []string{"a", "b"}, nil), rep("a", 1, A, farFuture), rep("a", 1, C, 1), rep("b", 1, C, 2)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutReleased, events.TypeRolloutSucceeded},
			projections.StageSucceeded, []string{"a", "b"}},
		{"reports folded before their revision keep stream order too",
			[]step{rep("a", 1, A, farFuture), rep("a", 1, C, 1), rev(1, []string{"a"}, nil)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutReleased, events.TypeRolloutSucceeded},
			projections.StageSucceeded, []string{"a"}},
		{"reports for an older revision are ignored",
			[]step{rev(1, []string{"a"}, nil), rev(2, []string{"a", "b"}, nil), rep("a", 1, F, 1), rep("a", 2, C, 2), rep("b", 1, C, 3)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutReleased, events.TypeRolloutStarted, events.TypeRolloutReleased},
			projections.StageReleased, []string{"a", "b"}},
		{"reports from devices outside the frozen targets are ignored",
			[]step{rev(1, []string{"a"}, nil), rep("z", 1, F, 1), rep("a", 1, C, 2)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutReleased, events.TypeRolloutSucceeded},
			projections.StageSucceeded, []string{"a"}},
		{"a new revision starts over even after a failed one",
			[]step{rev(1, []string{"a"}, []string{"a"}), rep("a", 1, F, 1), rev(2, []string{"a"}, []string{"a"}), rep("a", 2, C, 2)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanaryFailed, events.TypeRolloutFailed,
				events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanariesConverged, events.TypeRolloutReleased, events.TypeRolloutSucceeded},
			projections.StageSucceeded, []string{"a"}},
		{"a removed target no longer holds the rollout open",
			[]step{rev(1, []string{"a", "b"}, nil), rep("a", 1, C, 1), removed("b")},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutReleased, events.TypeRolloutTargetRemoved, events.TypeRolloutSucceeded},
			projections.StageSucceeded, []string{"a"}},
		{"a report of a removed target is ignored",
			[]step{rev(1, []string{"a", "b"}, nil), removed("b"), rep("b", 1, F, 1), rep("a", 1, C, 2)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutReleased, events.TypeRolloutTargetRemoved, events.TypeRolloutSucceeded},
			projections.StageSucceeded, []string{"a"}},
		{"removing the converged-pending canary releases the rest once the other canary converged",
			[]step{rev(1, []string{"a", "b", "c"}, []string{"a", "b"}), rep("a", 1, C, 1), removed("b")},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutTargetRemoved,
				events.TypeRolloutCanariesConverged, events.TypeRolloutReleased},
			projections.StageReleased, []string{"a", "c"}},
		{"removing every canary fails the canary stage instead of releasing the rest",
			[]step{rev(1, []string{"a", "b"}, []string{"a"}), removed("a")},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutTargetRemoved,
				events.TypeRolloutCanaryFailed, events.TypeRolloutFailed},
			projections.StageFailed, nil},
		{"removing the last target fails the revision: it has no targets",
			[]step{rev(1, []string{"a"}, nil), removed("a")},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutReleased, events.TypeRolloutTargetRemoved, events.TypeRolloutFailed},
			projections.StageFailed, nil},
		{"a revision without targets fails at once instead of succeeding with nothing deployed",
			[]step{rev(1, nil, nil)},
			[]events.Type{events.TypeRolloutStarted, events.TypeRolloutFailed},
			projections.StageFailed, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, log := drive(t, tc.steps)
			if diff := cmp.Diff(tc.wantLog, log); diff != "" {
				t.Errorf("transitions (-want +got):\n%s", diff)
			}
			if r.Stage != tc.wantStage {
				t.Errorf("stage %q, want %q", r.Stage, tc.wantStage)
			}
			if got := r.Released(); !slices.Equal(got, tc.wantReleased) && !(len(got) == 0 && len(tc.wantReleased) == 0) {
				t.Errorf("released %v, want %v", got, tc.wantReleased)
			}
		})
	}
}

func TestRolloutCountsAndFailure(t *testing.T) {
	r, _ := drive(t, []step{rev(1, []string{"a", "b", "c"}, []string{"a"}), rep("a", 1, events.WorkloadConverged, 1),
		{report: &report{device: "b", gen: 1, uid: "u1", phase: events.WorkloadFailed, err: "exit 3", at: 2}}})
	want := events.RolloutCounts{Total: 3, Succeeded: 1, Pending: 1, Failed: 1, Canaries: 1, CanariesSucceeded: 1}
	if diff := cmp.Diff(want, r.Counts()); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if r.LastFailure == nil || r.LastFailure.Device != "b" || r.LastFailure.Error != "exit 3" {
		t.Errorf("last failure %+v", r.LastFailure)
	}
}

// TestTheLatestFailureIsTheLatestInTheStream: which failure is the latest
// is stream order, never the devices' clocks, also for reports folded
// before their revision.
func TestTheLatestFailureIsTheLatestInTheStream(t *testing.T) {
	F := events.WorkloadFailed
	fail := func(device string, at int) step {
		return step{report: &report{device: device, gen: 1, uid: "u1", phase: F, err: "exit " + device, at: at}}
	}
	tests := []struct {
		name  string
		steps []step
		want  string
	}{
		{"a failure stored later with an earlier clock is the latest",
			[]step{rev(1, []string{"a", "b", "c"}, nil), fail("b", farFuture), fail("c", 1)}, "c"},
		{"a failure stored later with an earlier clock is the latest when both came before the revision",
			[]step{fail("c", farFuture), fail("b", 1), fail("a", 2), fail("c", 3), fail("b", -farFuture), rev(1, []string{"a", "b", "c"}, nil)}, "b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := drive(t, tc.steps)
			if r.LastFailure == nil || r.LastFailure.Device != tc.want || r.LastFailure.Error != "exit "+tc.want {
				t.Errorf("last failure %+v, want %s's", r.LastFailure, tc.want)
			}
			st, _ := r.Status()
			if st.LatestFailure == nil || st.LatestFailure.Device != tc.want {
				t.Errorf("status latestFailure %+v, want %s's", st.LatestFailure, tc.want)
			}
		})
	}
}

func TestApplyNeverChangesItsInput(t *testing.T) {
	r, _ := drive(t, []step{rev(1, []string{"a", "b"}, nil), rep("a", 1, events.WorkloadConverged, 1)})
	before := r.Results["b"]
	_ = r.Apply(mustNew(t, events.Keys{Device: "b"}, events.WorkloadStatus{UID: "u1", Generation: 1, Phase: events.WorkloadFailed, Since: t0}))
	if r.Results["b"] != before {
		t.Error("Apply changed the receiver's results")
	}
}

func TestATransitionFoldedAgainNeverMovesTheRolloutBack(t *testing.T) {
	dep := events.Keys{Namespace: "lab", Name: "api"}
	var r projections.Rollout
	r = r.Apply(mustNew(t, dep, events.DeploymentRevisionCreated{UID: "u1", Generation: 1, Targets: []string{"a", "b"}, Canaries: []string{"a"}}))
	started := mustNew(t, dep, events.NewRolloutTransition(events.TypeRolloutStarted, events.RolloutTransition{UID: "u1", Generation: 1}))
	canary := mustNew(t, dep, events.NewRolloutTransition(events.TypeRolloutCanaryStage, events.RolloutTransition{UID: "u1", Generation: 1}))
	r = r.Apply(started).Apply(canary).Apply(started) // the runner reads its own appends back
	if r.Stage != projections.StageCanary {
		t.Errorf("stage %q after re-reading started, want Canary", r.Stage)
	}
	if next := r.Next(); len(next) != 0 {
		t.Errorf("decided %d transitions again", len(next))
	}
}

// TestFoldInPlaceEqualsApplyAndItsCountsStayExact drives 2,000 random
// reports (late, repeated, flipping, from non-targets) through Apply and
// through Fold, with a JSON round trip of the Fold state half way (as a
// checkpoint restore does): both reach the same state, and the counts kept
// report by report always equal counting the results from scratch.
func TestFoldInPlaceEqualsApplyAndItsCountsStayExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var targets, canaries []string
	for i := range 40 {
		targets = append(targets, fmt.Sprintf("d%02d", i))
		if i%7 == 0 {
			canaries = append(canaries, fmt.Sprintf("d%02d", i))
		}
	}
	dep := events.Keys{Namespace: "lab", Name: "api"}
	revision := mustNew(t, dep, events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "r", Score: json.RawMessage(`{}`),
		Targets: targets, Canaries: canaries})
	byValue := projections.Rollout{}.Apply(revision)
	var inPlace projections.Rollout
	inPlace.Fold(revision)
	phases := []events.WorkloadPhase{events.WorkloadApplying, events.WorkloadConverged, events.WorkloadFailed, events.WorkloadPending}
	brute := func(r projections.Rollout) events.RolloutCounts {
		c := events.RolloutCounts{Total: len(r.Targets), Canaries: len(r.Canaries)}
		for _, d := range r.Targets {
			switch r.Results[d].Phase {
			case events.WorkloadConverged:
				c.Succeeded++
				if r.IsCanary(d) {
					c.CanariesSucceeded++
				}
			case events.WorkloadFailed:
				c.Failed++
				if r.IsCanary(d) {
					c.CanariesFailed++
				}
			default:
				c.Pending++
			}
		}
		return c
	}
	for i := range 2000 {
		device := fmt.Sprintf("d%02d", rng.IntN(45)) // some are not targets
		ev := mustNew(t, events.Keys{Device: device}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1,
			Phase: phases[rng.IntN(len(phases))], Since: t0.Add(time.Duration(rng.IntN(3000)) * time.Second)})
		byValue = byValue.Apply(ev)
		inPlace.Fold(ev)
		if i == 1000 {
			b, err := json.Marshal(inPlace)
			if err != nil {
				t.Fatal(err)
			}
			inPlace = projections.Rollout{}
			if err := json.Unmarshal(b, &inPlace); err != nil {
				t.Fatal(err)
			}
		}
		if got, want := inPlace.Counts(), brute(inPlace); got != want {
			t.Fatalf("after report %d: counts %+v, from scratch %+v", i, got, want)
		}
		if got, want := byValue.Counts(), brute(byValue); got != want {
			t.Fatalf("after report %d (Apply): counts %+v, from scratch %+v", i, got, want)
		}
	}
	a, _ := json.Marshal(byValue)
	b, _ := json.Marshal(inPlace)
	if string(a) != string(b) {
		t.Fatalf("Fold and Apply differ:\n%s\n%s", a, b)
	}
}

// TestARemovalSurvivesACheckpointAndAnEarlyFold: a target removal folded
// before its revision (the streams are read side by side) or carried
// through a snapshot gives the same state as folding in order.
func TestARemovalSurvivesACheckpointAndAnEarlyFold(t *testing.T) {
	dep := events.Keys{Namespace: "lab", Name: "api"}
	revision := mustNew(t, dep, events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "r", Score: json.RawMessage(`{}`),
		Targets: []string{"a", "b", "c"}, Canaries: []string{"a"}})
	tr := func(typ events.Type, d events.RolloutTransition) events.Event {
		d.UID, d.Generation, d.RevisionID = "u1", 1, "r"
		return mustNew(t, dep, events.NewRolloutTransition(typ, d))
	}
	transitions := []events.Event{tr(events.TypeRolloutStarted, events.RolloutTransition{}),
		tr(events.TypeRolloutCanaryStage, events.RolloutTransition{Released: []string{"a"}}),
		tr(events.TypeRolloutTargetRemoved, events.RolloutTransition{Device: "b", Error: "Device quarantined"})}

	var inOrder projections.Rollout
	inOrder = inOrder.Apply(revision)
	for _, ev := range transitions {
		inOrder = inOrder.Apply(ev)
	}
	var early projections.Rollout
	for _, ev := range transitions {
		early = early.Apply(ev)
	}
	early = early.Apply(revision)
	b, err := json.Marshal(inOrder)
	if err != nil {
		t.Fatal(err)
	}
	var restored projections.Rollout
	if err := json.Unmarshal(b, &restored); err != nil {
		t.Fatal(err)
	}
	want := []projections.RemovedTarget{{Device: "b", Reason: "Device quarantined"}}
	for name, r := range map[string]projections.Rollout{"in order": inOrder, "early": early, "restored": restored} {
		if diff := cmp.Diff(want, r.Removed); diff != "" || !slices.Equal(r.Targets, []string{"a", "c"}) || r.Counts().Total != 2 {
			t.Errorf("%s: removed (-want +got):\n%s\ntargets %v, counts %+v", name, diff, r.Targets, r.Counts())
		}
		if r.CanariesAt.IsZero() {
			t.Errorf("%s: the canary stage's time is lost", name)
		}
	}
	if a, b := mustJSON(t, early), mustJSON(t, inOrder); a != b {
		t.Errorf("early and in-order folds differ:\n%s\n%s", a, b)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestADevicesErrorIsWrittenEscapedIntoTheDeploymentStatus: a device's
// error text reaches status.latestFailure; characters that would reorder or
// hide text in kubectl's output are escaped there (line feeds are kept).
func TestADevicesErrorIsWrittenEscapedIntoTheDeploymentStatus(t *testing.T) {
	r, _ := drive(t, []step{rev(1, []string{"a", "b"}, []string{"a"}),
		{report: &report{device: "a", gen: 1, uid: "u1", phase: events.WorkloadFailed, err: "exit 3\u202e\u200b\nforged", at: 1}}})
	st, ok := r.Status()
	if !ok || st.LatestFailure == nil {
		t.Fatalf("no latest failure in the status %+v", st)
	}
	if want := `exit 3\u202e\u200b` + "\n" + `forged`; st.LatestFailure.Error != want {
		t.Errorf("latestFailure.error %q, want %q", st.LatestFailure.Error, want)
	}
}

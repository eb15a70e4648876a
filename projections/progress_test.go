package projections_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

// pstep is one event of a progress test, at a time in seconds after t0:
// the operator's time for the revision and transitions, the stream's
// stored time for a report (whose device clock says something else).
type pstep struct {
	at int
	// exactly one of these
	revision   *events.DeploymentRevisionCreated
	transition events.Type
	batch      int
	device     string
	phase      events.WorkloadPhase
	err        string
}

func prev(at int, targets, canaries []string, plan *events.RolloutPlan, batches []int, deadline int64) pstep {
	return pstep{at: at, revision: &events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "1-abc", Score: json.RawMessage(`{}`),
		Targets: targets, Canaries: canaries, Plan: plan, TargetBatches: batches, ProgressDeadlineSeconds: deadline}}
}

func ptr(at int, typ events.Type) pstep { return pstep{at: at, transition: typ} }

func pbatch(at int, typ events.Type, batch int) pstep {
	return pstep{at: at, transition: typ, batch: batch}
}

func prep(at int, device string, phase events.WorkloadPhase, err string) pstep {
	return pstep{at: at, device: device, phase: phase, err: err}
}

func sec(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }

// record is the step as the runner reads it: its event and the stream's
// stored time. A report's device clock is a year off, so a fold that
// took it instead of the stored time would be seen.
func (s pstep) record(t *testing.T) events.Record {
	t.Helper()
	at := sec(s.at)
	var ev events.Event
	var err error
	switch {
	case s.revision != nil:
		ev, err = events.New(events.Keys{Namespace: "lab", Name: "api"}, *s.revision, events.WithTime(at))
	case s.transition != "":
		ev, err = events.New(events.Keys{Namespace: "lab", Name: "api"}, events.NewRolloutTransition(s.transition,
			events.RolloutTransition{UID: "u1", Generation: 1, RevisionID: "1-abc", Batch: s.batch, By: "ana"}), events.WithTime(at))
	default:
		ev, err = events.New(events.Keys{Device: s.device}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1,
			Phase: s.phase, Error: s.err, Since: at.AddDate(-1, 0, 0)}, events.WithTime(at.AddDate(-1, 0, 0)))
	}
	if err != nil {
		t.Fatal(err)
	}
	return events.Record{Event: ev, Stored: at}
}

func foldSteps(t *testing.T, steps []pstep) projections.Rollout {
	t.Helper()
	var r projections.Rollout
	for _, s := range steps {
		p := projections.NewStoredPayload(s.record(t))
		r.FoldPayload(&p)
	}
	return r
}

var twoTargets = []string{"podman-1", "podman-2"}

func TestProgressCountsFirstReportsAndFirstResultsOnly(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []pstep
		want  int // ProgressAt, seconds after t0
	}{
		{"the revision event starts the clock", []pstep{prev(0, twoTargets, nil, nil, nil, 0)}, 0},
		{"a transition moves it", []pstep{prev(0, twoTargets, nil, nil, nil, 0), ptr(1, events.TypeRolloutStarted), ptr(2, events.TypeRolloutReleased)}, 2},
		{"a target's first report moves it, at the stream's time and not the device's", []pstep{prev(0, twoTargets, nil, nil, nil, 0),
			ptr(1, events.TypeRolloutReleased), prep(30, "podman-1", events.WorkloadPending, "")}, 30},
		{"Pending and Applying chatter after the first report never moves it", []pstep{prev(0, twoTargets, nil, nil, nil, 0),
			ptr(1, events.TypeRolloutReleased), prep(30, "podman-1", events.WorkloadPending, ""),
			prep(40, "podman-1", events.WorkloadApplying, ""), prep(50, "podman-1", events.WorkloadPending, "registry unavailable, retrying"),
			prep(60, "podman-1", events.WorkloadApplying, ""), prep(70, "podman-1", events.WorkloadPending, "registry unavailable, retrying")}, 30},
		{"a target's first result moves it", []pstep{prev(0, twoTargets, nil, nil, nil, 0), ptr(1, events.TypeRolloutReleased),
			prep(30, "podman-1", events.WorkloadPending, ""), prep(90, "podman-1", events.WorkloadConverged, "")}, 90},
		{"a first result without a report before it moves it once", []pstep{prev(0, twoTargets, nil, nil, nil, 0), ptr(1, events.TypeRolloutReleased),
			prep(30, "podman-1", events.WorkloadFailed, "exit 2")}, 30},
		{"a second result after flapping never moves it", []pstep{prev(0, twoTargets, nil, nil, nil, 0), ptr(1, events.TypeRolloutReleased),
			prep(30, "podman-1", events.WorkloadConverged, ""), prep(40, "podman-1", events.WorkloadPending, ""),
			prep(50, "podman-1", events.WorkloadConverged, ""), prep(60, "podman-1", events.WorkloadFailed, "exit 1")}, 30},
		{"each target moves it with its own first report", []pstep{prev(0, twoTargets, nil, nil, nil, 0), ptr(1, events.TypeRolloutReleased),
			prep(30, "podman-1", events.WorkloadPending, ""), prep(45, "podman-2", events.WorkloadApplying, "")}, 45},
		{"a report of a device that is no target never moves it", []pstep{prev(0, twoTargets, nil, nil, nil, 0), ptr(1, events.TypeRolloutReleased),
			prep(30, "podman-9", events.WorkloadConverged, "")}, 1},
		{"a pause and a resume move it", []pstep{prev(0, twoTargets, nil, nil, nil, 0), ptr(1, events.TypeRolloutReleased),
			ptr(100, events.TypeRolloutPaused), ptr(500, events.TypeRolloutResumed)}, 500},
		{"reports folded before their revision count when it comes", []pstep{prep(30, "podman-1", events.WorkloadPending, ""),
			prep(40, "podman-1", events.WorkloadPending, "again"), prep(50, "podman-2", events.WorkloadConverged, ""),
			prev(0, twoTargets, nil, nil, nil, 0)}, 50},
		{"transitions folded before their revision count when it comes", []pstep{ptr(1, events.TypeRolloutStarted), ptr(7, events.TypeRolloutReleased),
			prev(0, twoTargets, nil, nil, nil, 0)}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := foldSteps(t, tc.steps)
			if diff := cmp.Diff(sec(tc.want), r.ProgressAt); diff != "" {
				t.Errorf("ProgressAt (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFlappingCannotHoldTheDeadlineOff: a device that alternates Pending
// and Applying every few seconds forever puts the deadline off by its
// first report only.
func TestFlappingCannotHoldTheDeadlineOff(t *testing.T) {
	steps := []pstep{prev(0, twoTargets, nil, nil, nil, 60), ptr(1, events.TypeRolloutReleased), prep(10, "podman-1", events.WorkloadPending, "")}
	for at := 15; at < 3600; at += 5 {
		phase := events.WorkloadApplying
		if at%10 == 0 {
			phase = events.WorkloadPending
		}
		steps = append(steps, prep(at, "podman-1", phase, "registry unavailable, retrying"))
	}
	r := foldSteps(t, steps)
	if r.DeadlineExceeded(sec(69), 0) || !r.DeadlineExceeded(sec(70), 0) {
		t.Errorf("exceeded at 69s: %v, at 70s: %v; want false then true (first report at 10s, deadline 60s)",
			r.DeadlineExceeded(sec(69), 0), r.DeadlineExceeded(sec(70), 0))
	}
}

func TestTheProgressDeadline(t *testing.T) {
	oneBatch := &events.RolloutPlan{Batches: []events.PlanBatch{{Size: 1, SuccessPercent: 100}, {Size: 1, SuccessPercent: 100, SoakSeconds: 3600}}}
	manual := &events.RolloutPlan{Approval: events.ApprovalManual, Batches: []events.PlanBatch{{Size: 1, SuccessPercent: 100}, {Size: 1, SuccessPercent: 100}}}
	released := []pstep{prev(0, twoTargets, nil, nil, nil, 0), ptr(1, events.TypeRolloutStarted), ptr(2, events.TypeRolloutReleased),
		prep(5, "podman-1", events.WorkloadPending, "registry unavailable, retrying")}
	for _, tc := range []struct {
		name  string
		steps []pstep
		now   int
		def   time.Duration
		want  bool
	}{
		{"a rollout without progress for the operator's deadline exceeds it", released, 605, 10 * time.Minute, true},
		{"just before the deadline it is not exceeded", released, 604, 10 * time.Minute, false},
		{"no deadline is never exceeded", released, 100000, 0, false},
		{"the revision's own deadline replaces the operator's", []pstep{prev(0, twoTargets, nil, nil, nil, 30), ptr(2, events.TypeRolloutReleased)},
			32, 10 * time.Minute, true},
		{"the revision's own deadline counts when the operator has none", []pstep{prev(0, twoTargets, nil, nil, nil, 30), ptr(2, events.TypeRolloutReleased)},
			31, 0, false},
		{"a paused rollout is not exceeded", append(append([]pstep{}, released...), ptr(10, events.TypeRolloutPaused)), 100000, time.Minute, false},
		{"a resumed rollout counts from its resume", append(append([]pstep{}, released...), ptr(10, events.TypeRolloutPaused), ptr(1000, events.TypeRolloutResumed)),
			1059, time.Minute, false},
		{"a resumed rollout exceeds its deadline after the resume", append(append([]pstep{}, released...), ptr(10, events.TypeRolloutPaused), ptr(1000, events.TypeRolloutResumed)),
			1060, time.Minute, true},
		{"a rollout that awaits an approval is not exceeded", []pstep{prev(0, twoTargets, nil, manual, []int{1, 2}, 0), ptr(1, events.TypeRolloutStarted),
			pbatch(1, events.TypeRolloutAwaitingApproval, 1)}, 100000, time.Minute, false},
		{"an approval restarts the clock", []pstep{prev(0, twoTargets, nil, manual, []int{1, 2}, 0), ptr(1, events.TypeRolloutStarted),
			pbatch(1, events.TypeRolloutAwaitingApproval, 1), pbatch(500, events.TypeRolloutApproved, 1)}, 559, time.Minute, false},
		{"a soaking batch is not exceeded", []pstep{prev(0, twoTargets, nil, oneBatch, []int{1, 2}, 0), ptr(1, events.TypeRolloutStarted),
			pbatch(1, events.TypeRolloutBatchStarted, 1), prep(3, "podman-1", events.WorkloadConverged, ""), pbatch(4, events.TypeRolloutBatchSucceeded, 1),
			pbatch(4, events.TypeRolloutBatchStarted, 2), prep(5, "podman-2", events.WorkloadConverged, ""), pbatch(6, events.TypeRolloutBatchSoaking, 2)},
			3000, time.Minute, false},
		{"a rollout that succeeded is not exceeded", append(append([]pstep{}, released...), prep(6, "podman-1", events.WorkloadConverged, ""),
			prep(7, "podman-2", events.WorkloadConverged, ""), ptr(8, events.TypeRolloutSucceeded)), 100000, time.Minute, false},
		{"a rollout that failed is not exceeded", append(append([]pstep{}, released...), prep(6, "podman-1", events.WorkloadFailed, "exit 2"),
			ptr(8, events.TypeRolloutFailed)), 100000, time.Minute, false},
		{"the zero time is never past a deadline", released, -1, time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := foldSteps(t, tc.steps)
			now := sec(tc.now)
			if tc.now < 0 {
				now = time.Time{}
			}
			if got := r.DeadlineExceeded(now, tc.def); got != tc.want {
				t.Errorf("DeadlineExceeded = %v, want %v (ProgressAt %s)", got, tc.want, r.ProgressAt)
			}
		})
	}
}

func TestTheProgressingCondition(t *testing.T) {
	six := []string{"podman-1", "podman-2", "podman-3", "podman-4", "podman-5", "podman-6", "podman-7"}
	released := []pstep{prev(0, six, nil, nil, nil, 0), ptr(1, events.TypeRolloutStarted), ptr(2, events.TypeRolloutReleased),
		prep(3, "podman-2", events.WorkloadPending, "registry unavailable, retrying: image localhost/fleet-examples/analysis-apii:v1"),
		prep(4, "podman-1", events.WorkloadConverged, ""), prep(5, "podman-4", events.WorkloadApplying, ""),
		prep(6, "podman-6", events.WorkloadPending, strings.Repeat("x", 300))}
	manual := &events.RolloutPlan{Approval: events.ApprovalManual, Batches: []events.PlanBatch{{Size: 7, SuccessPercent: 100}}}
	for _, tc := range []struct {
		name  string
		steps []pstep
		now   int
		want  metav1.Condition
		ready string // a substring of the Ready message
	}{
		{"a moving rollout is True", released, 60, metav1.Condition{Status: metav1.ConditionTrue, Reason: fleetv1.ReasonRolloutProgressing,
			LastTransitionTime: metav1.NewTime(sec(6)), Message: "revision 1-abc: last progress at 2026-11-30T12:00:06Z; progress deadline 10m0s"}, "1 of 7 targets converged"},
		{"a rollout past its deadline is False, naming five waiting targets and their last report", released, 606, metav1.Condition{Status: metav1.ConditionFalse,
			Reason: fleetv1.ReasonProgressDeadlineExceeded, LastTransitionTime: metav1.NewTime(sec(606)),
			Message: "revision 1-abc: no progress within the progress deadline (10m0s) since 2026-11-30T12:00:06Z: no transition, and no target's first report or first result (Converged or Failed); " +
				"6 waiting: podman-2 Pending since 2025-11-30T12:00:03Z: registry unavailable, retrying: image localhost/fleet-examples/analysis-apii:v1; podman-3 no report yet; " +
				"podman-4 Applying since 2025-11-30T12:00:05Z; podman-5 no report yet; podman-6 Pending since 2025-11-30T12:00:06Z: " + strings.Repeat("x", 200) + "…; and 1 more"},
			"1 of 7 targets converged; progress deadline exceeded"},
		{"a paused rollout is Unknown", append(append([]pstep{}, released...), ptr(10, events.TypeRolloutPaused)), 100000, metav1.Condition{Status: metav1.ConditionUnknown,
			Reason: fleetv1.ReasonRolloutPaused, LastTransitionTime: metav1.NewTime(sec(10)),
			Message: "revision 1-abc: paused by ana; the progress deadline does not run until it is resumed"}, "paused by ana"},
		{"a rollout awaiting an approval is Unknown", []pstep{prev(0, six, nil, manual, []int{1, 1, 1, 1, 1, 1, 1}, 0), ptr(1, events.TypeRolloutStarted),
			pbatch(2, events.TypeRolloutAwaitingApproval, 1)}, 100000, metav1.Condition{Status: metav1.ConditionUnknown,
			Reason: fleetv1.ReasonAwaitingApproval, LastTransitionTime: metav1.NewTime(sec(2)),
			Message: "revision 1-abc: batch 1 awaits approval; the progress deadline does not run until it is approved"}, "batch 1 awaits approval"},
		{"a rollout that succeeded is False", []pstep{prev(0, six[:1], nil, nil, nil, 0), ptr(1, events.TypeRolloutStarted), ptr(2, events.TypeRolloutReleased),
			prep(3, "podman-1", events.WorkloadConverged, ""), ptr(4, events.TypeRolloutSucceeded)}, 100000, metav1.Condition{Status: metav1.ConditionFalse,
			Reason: fleetv1.ReasonRolloutSucceeded, LastTransitionTime: metav1.NewTime(sec(4)),
			Message: "revision 1-abc: the rollout ended: it succeeded"}, "all 1 targets converged"},
		{"a rollout that failed is False with Ready's reason", []pstep{prev(0, six[:1], nil, nil, nil, 0), ptr(1, events.TypeRolloutStarted), ptr(2, events.TypeRolloutReleased),
			prep(3, "podman-1", events.WorkloadFailed, "exit 2"), ptr(4, events.TypeRolloutFailed)}, 100000, metav1.Condition{Status: metav1.ConditionFalse,
			Reason: fleetv1.ReasonRolloutFailed, LastTransitionTime: metav1.NewTime(sec(4)),
			Message: "the rollout ended: it failed: revision 1-abc: 1 failed, 0 succeeded, 0 pending of 1"}, "1 failed"},
		{"a revision without targets is False with NoTargets", []pstep{prev(0, nil, nil, nil, nil, 0), ptr(1, events.TypeRolloutStarted),
			ptr(1, events.TypeRolloutFailed)}, 100000, metav1.Condition{Status: metav1.ConditionFalse,
			Reason: fleetv1.ReasonNoTargets, LastTransitionTime: metav1.NewTime(sec(1)),
			Message: "the rollout ended: it failed: revision 1-abc has no targets: no eligible device matched when it was created (the TargetsResolved condition says why); apply a new generation once devices match"}, "no targets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := foldSteps(t, tc.steps)
			st, ok := r.StatusAt(sec(tc.now), 10*time.Minute)
			if !ok {
				t.Fatal("no status")
			}
			got := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionProgressing)
			if got == nil {
				t.Fatalf("no Progressing condition in %+v", st.Conditions)
			}
			tc.want.Type, tc.want.ObservedGeneration = fleetv1.ConditionProgressing, 1
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("Progressing (-want +got):\n%s", diff)
			}
			if st.Conditions[0].Type != fleetv1.ConditionReady {
				t.Errorf("the first condition is %s, want Ready (readers take Conditions[0])", st.Conditions[0].Type)
			}
			if ready := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionReady); ready == nil || !strings.Contains(ready.Message, tc.ready) {
				t.Errorf("Ready %+v, want a message with %q", ready, tc.ready)
			}
		})
	}
}

// TestTheProgressClockIsTheSameInAnyFoldOrder: the runner reads its three
// streams side by side, so a rebuild may fold reports before their
// revision and transitions in any interleaving: the clock, and so the
// status at the same now, come out the same.
func TestTheProgressClockIsTheSameInAnyFoldOrder(t *testing.T) {
	revision := []pstep{prev(0, twoTargets, []string{"podman-1"}, nil, nil, 0)}
	transitions := []pstep{ptr(1, events.TypeRolloutStarted), ptr(1, events.TypeRolloutCanaryStage), ptr(40, events.TypeRolloutCanariesConverged),
		ptr(40, events.TypeRolloutReleased)}
	reports := []pstep{prep(10, "podman-1", events.WorkloadPending, ""), prep(20, "podman-1", events.WorkloadApplying, ""),
		prep(39, "podman-1", events.WorkloadConverged, ""), prep(45, "podman-2", events.WorkloadPending, "registry unavailable, retrying"),
		prep(50, "podman-2", events.WorkloadApplying, ""), prep(55, "podman-2", events.WorkloadPending, "registry unavailable, retrying")}
	live := foldSteps(t, []pstep{revision[0], transitions[0], transitions[1], reports[0], reports[1], reports[2], transitions[2], transitions[3],
		reports[3], reports[4], reports[5]})
	for _, order := range [][][]pstep{{reports, transitions, revision}, {transitions, reports, revision}, {revision, reports, transitions},
		{reports, revision, transitions}} {
		var steps []pstep
		for _, part := range order {
			steps = append(steps, part...)
		}
		r := foldSteps(t, steps)
		for _, now := range []int{100, 644, 645, 10000} {
			want, _ := live.StatusAt(sec(now), 10*time.Minute)
			got, _ := r.StatusAt(sec(now), 10*time.Minute)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("order %s, at %ds: status (-live +rebuilt):\n%s", describe(order), now, diff)
			}
		}
	}
	if want := sec(45); !live.ProgressAt.Equal(want) {
		t.Errorf("ProgressAt %s, want %s (podman-2's first report)", live.ProgressAt, want)
	}
}

func describe(order [][]pstep) string {
	var parts []string
	for _, p := range order {
		switch {
		case p[0].revision != nil:
			parts = append(parts, "revision")
		case p[0].transition != "":
			parts = append(parts, "transitions")
		default:
			parts = append(parts, "reports")
		}
	}
	return fmt.Sprint(parts)
}

// TestTheProgressClockSurvivesACheckpoint: the runner's checkpoint is the
// fold's JSON; restored, it has the same clock and the same first reports.
func TestTheProgressClockSurvivesACheckpoint(t *testing.T) {
	r := foldSteps(t, []pstep{prev(0, twoTargets, nil, nil, nil, 45), ptr(1, events.TypeRolloutReleased), prep(10, "podman-1", events.WorkloadPending, "")})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back projections.Rollout
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	for _, s := range []pstep{prep(20, "podman-1", events.WorkloadApplying, ""), prep(30, "podman-1", events.WorkloadConverged, "")} {
		p := projections.NewStoredPayload(s.record(t))
		r.FoldPayload(&p)
		p = projections.NewStoredPayload(s.record(t))
		back.FoldPayload(&p)
	}
	if !back.ProgressAt.Equal(sec(30)) || back.ProgressDeadline != 45*time.Second {
		t.Errorf("restored: ProgressAt %s, deadline %s; want %s and 45s", back.ProgressAt, back.ProgressDeadline, sec(30))
	}
	want, _ := r.StatusAt(sec(80), 0)
	got, _ := back.StatusAt(sec(80), 0)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-live +restored):\n%s", diff)
	}
}

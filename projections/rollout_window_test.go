package projections_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

// wstep is one event of a window test at a time in seconds after t0 (the
// stream's stored time); a report's device clock is a year off, and
// opensIn is the wait it claims (WindowOpens = its Since + opensIn; 0: no
// claim).
type wstep struct {
	at       int
	revision *events.DeploymentRevisionCreated
	released bool
	device   string
	phase    events.WorkloadPhase
	opensIn  time.Duration
	// sinceAt, when set, is the report's since (seconds after t0, a year
	// off like the others) instead of at: a report sent again.
	sinceAt int
}

var nightly = &events.MaintenanceWindow{Start: "02:00", Duration: "2h"}

func wrev(window *events.MaintenanceWindow, targets ...string) wstep {
	return wstep{revision: &events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "1-abc", Score: json.RawMessage(`{}`),
		Targets: targets, Canaries: []string{}, ProgressDeadlineSeconds: 600, Window: window}}
}

func wrel(at int) wstep { return wstep{at: at, released: true} }

func wrep(at int, device string, phase events.WorkloadPhase, opensIn time.Duration) wstep {
	return wstep{at: at, device: device, phase: phase, opensIn: opensIn}
}

func foldWindow(t *testing.T, steps ...wstep) projections.Rollout {
	t.Helper()
	var r projections.Rollout
	for _, s := range steps {
		at := sec(s.at)
		var ev events.Event
		var err error
		switch {
		case s.revision != nil:
			ev, err = events.New(events.Keys{Namespace: "lab", Name: "api"}, *s.revision, events.WithTime(at))
		case s.released:
			ev, err = events.New(events.Keys{Namespace: "lab", Name: "api"}, events.NewRolloutTransition(events.TypeRolloutReleased,
				events.RolloutTransition{UID: "u1", Generation: 1, RevisionID: "1-abc"}), events.WithTime(at))
		default:
			d := events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1, RevisionID: "1-abc",
				Phase: s.phase, Since: at.AddDate(-1, 0, 0)}
			if s.sinceAt != 0 {
				d.Since = sec(s.sinceAt).AddDate(-1, 0, 0)
			}
			if s.opensIn != 0 {
				opens := d.Since.Add(s.opensIn)
				d.WindowOpens = &opens
			}
			if s.phase == events.WorkloadPending {
				d.Error = "waiting for the maintenance window"
			}
			ev, err = events.New(events.Keys{Device: s.device}, d, events.WithTime(d.Since))
		}
		if err != nil {
			t.Fatal(err)
		}
		p := projections.NewStoredPayload(events.Record{Event: ev, Stored: at})
		r.FoldPayload(&p)
	}
	return r
}

func progressingReason(t *testing.T, st fleetv1.DeploymentStatus) string {
	t.Helper()
	c := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionProgressing)
	if c == nil {
		t.Fatal("no Progressing condition")
	}
	return c.Reason
}

// TestTargetsWaitingForTheirWindowAreNeitherFailedNorStuck: a target that
// reports the revision Pending because its maintenance window is closed is
// counted waiting with the opening on the operator's clock (stored time
// plus the wait it reported, whatever its own clock says), and the
// progress deadline does not run while every target without a result
// waits; once a window opened without a result, the deadline runs from
// the opening (ADR 0029).
func TestTargetsWaitingForTheirWindowAreNeitherFailedNorStuck(t *testing.T) {
	r := foldWindow(t, wrev(nightly, "a", "b"), wrel(1),
		wrep(5, "a", events.WorkloadPending, 3*time.Hour), wrep(6, "b", events.WorkloadPending, 5*time.Hour))
	aOpens := sec(5).Add(3 * time.Hour)
	tests := []struct {
		name     string
		now      time.Time
		window   *fleetv1.WindowStatus
		reason   string
		exceeded bool
	}{
		{"both wait, long past the deadline", sec(7200), &fleetv1.WindowStatus{Waiting: 2, NextOpening: ptrTime(aOpens)},
			fleetv1.ReasonRolloutProgressing, false},
		{"a's window opened within the deadline", aOpens.Add(9 * time.Minute), &fleetv1.WindowStatus{Waiting: 2, NextOpening: ptrTime(aOpens)},
			fleetv1.ReasonRolloutProgressing, false},
		{"a's window opened a deadline ago without a result", aOpens.Add(11 * time.Minute), &fleetv1.WindowStatus{Waiting: 2, NextOpening: ptrTime(aOpens)},
			fleetv1.ReasonProgressDeadlineExceeded, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := r.DeadlineExceeded(tc.now, 0); got != tc.exceeded {
				t.Errorf("DeadlineExceeded = %v, want %v", got, tc.exceeded)
			}
			st, _ := r.StatusAt(tc.now, 0)
			if diff := cmp.Diff(tc.window, st.Window); diff != "" {
				t.Errorf("status.window (-want +got):\n%s", diff)
			}
			if got := progressingReason(t, st); got != tc.reason {
				t.Errorf("Progressing reason %q, want %q", got, tc.reason)
			}
			if c := r.Counts(); c.Failed != 0 || c.Pending != 2 {
				t.Errorf("counts %+v: waiting targets are pending, never failed", c)
			}
		})
	}
	t.Run("a target that switched is no longer waiting", func(t *testing.T) {
		r := foldWindow(t, wrev(nightly, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadPending, 3*time.Hour),
			wrep(6, "b", events.WorkloadPending, 5*time.Hour), wrep(3*3600+10, "a", events.WorkloadApplying, 0))
		st, _ := r.StatusAt(sec(3*3600+20), 0)
		want := &fleetv1.WindowStatus{Waiting: 1, NextOpening: ptrTime(sec(6).Add(5 * time.Hour))}
		if diff := cmp.Diff(want, st.Window); diff != "" {
			t.Errorf("status.window (-want +got):\n%s", diff)
		}
	})
	t.Run("the same report sent again after a reconnect keeps the opening", func(t *testing.T) {
		// An agent re-sends its last report unchanged (same since) after a
		// reconnect: stored later, it still claims the same opening.
		r := foldWindow(t, wrev(nightly, "a"), wrel(1), wrep(5, "a", events.WorkloadPending, 3*time.Hour))
		resent := foldWindow(t, wrev(nightly, "a"), wrel(1), wrep(5, "a", events.WorkloadPending, 3*time.Hour),
			wstep{at: 1805, device: "a", phase: events.WorkloadPending, opensIn: 3 * time.Hour, sinceAt: 5})
		if got, want := resent.WindowOpensOf("a"), r.WindowOpensOf("a"); !got.Equal(want) || want.IsZero() {
			t.Errorf("after the re-sent report the window opens at %s, want %s", got, want)
		}
	})
	t.Run("a revision without a window has no window status", func(t *testing.T) {
		st, _ := foldWindow(t, wrev(nil, "a"), wrel(1)).StatusAt(sec(2), 0)
		if st.Window != nil {
			t.Errorf("status.window = %+v", st.Window)
		}
	})
}

// TestADeviceClaimingAWindowTheRevisionDoesNotHaveChangesNothing: device
// input is hostile. A claim to wait for a window is believed only from a
// target handed a revision that has a window, in a Pending report, for a
// wait of more than 0 and at most 24 hours: otherwise the fold, the
// status and the progress deadline are exactly those of the same report
// without the claim.
func TestADeviceClaimingAWindowTheRevisionDoesNotHaveChangesNothing(t *testing.T) {
	tests := []struct {
		name    string
		claim   []wstep
		without []wstep
	}{
		{"a revision without a window",
			[]wstep{wrev(nil, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadPending, 3*time.Hour)},
			[]wstep{wrev(nil, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadPending, 0)}},
		{"a wait of more than a day",
			[]wstep{wrev(nightly, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadPending, 25*time.Hour)},
			[]wstep{wrev(nightly, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadPending, 0)}},
		{"an opening in the past",
			[]wstep{wrev(nightly, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadPending, -time.Hour)},
			[]wstep{wrev(nightly, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadPending, 0)}},
		{"a Converged report",
			[]wstep{wrev(nightly, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadConverged, time.Hour)},
			[]wstep{wrev(nightly, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadConverged, 0)}},
		{"a Failed report",
			[]wstep{wrev(nightly, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadFailed, time.Hour)},
			[]wstep{wrev(nightly, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadFailed, 0)}},
		{"a target not handed the revision yet",
			[]wstep{wrev(nightly, "a", "b"), wrep(5, "a", events.WorkloadPending, time.Hour)},
			[]wstep{wrev(nightly, "a", "b"), wrep(5, "a", events.WorkloadPending, 0)}},
		{"a report folded before its revision, of a revision without a window",
			[]wstep{wrep(0, "a", events.WorkloadPending, time.Hour), wrev(nil, "a", "b"), wrel(1)},
			[]wstep{wrep(0, "a", events.WorkloadPending, 0), wrev(nil, "a", "b"), wrel(1)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim, without := foldWindow(t, tc.claim...), foldWindow(t, tc.without...)
			for _, now := range []time.Time{sec(60), sec(700), sec(7200)} {
				if got, want := claim.DeadlineExceeded(now, 0), without.DeadlineExceeded(now, 0); got != want {
					t.Errorf("at %s DeadlineExceeded = %v, without the claim %v", now, got, want)
				}
				got, _ := claim.StatusAt(now, 0)
				want, _ := without.StatusAt(now, 0)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("at %s the status differs from the one without the claim (-without +claim):\n%s", now, diff)
				}
			}
			// The claim may be kept in the fold (a rebuild may read a
			// report before the release that hands the device the
			// revision), but it is never believed.
			if diff := cmp.Diff(without.Results, claim.Results, cmpopts.IgnoreFields(projections.DeviceResult{}, "WindowOpens")); diff != "" {
				t.Errorf("results (-without +claim):\n%s", diff)
			}
			for _, dev := range []string{"a", "b"} {
				if at := claim.WindowOpensOf(dev); !at.IsZero() {
					t.Errorf("%s is believed to wait for a window opening at %s", dev, at)
				}
			}
		})
	}
}

func ptrTime(t time.Time) *metav1.Time {
	m := metav1.NewTime(t)
	return &m
}

package rollouts

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// TestTheTargetTimeoutRunsFromTheWindowsOpening: a target that waits for
// the revision's maintenance window is not silent: the target timeout runs
// from the opening it reported (ADR 0029), while a target that reports
// Pending for another reason, or nothing, is removed as before.
func TestTheTargetTimeoutRunsFromTheWindowsOpening(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	var ro projections.Rollout
	fold := func(keys events.Keys, d events.Data, stored time.Time) {
		ev, err := events.New(keys, d, events.WithTime(stored))
		if err != nil {
			t.Fatal(err)
		}
		p := projections.NewStoredPayload(events.Record{Event: ev, Stored: stored})
		ro.FoldPayload(&p)
	}
	dep := events.Keys{Namespace: "lab", Name: "web"}
	fold(dep, events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "1-web", ScoreDigest: "sha256:web",
		Score: []byte(`{"type":"PodmanV0"}`), Targets: []string{"a", "b", "c"}, Canaries: []string{},
		Window: &events.MaintenanceWindow{Start: "02:00", Duration: "2h"}}, at)
	fold(dep, events.NewRolloutTransition(events.TypeRolloutReleased, events.RolloutTransition{UID: "u", Generation: 1, RevisionID: "1-web"}), at)
	deviceClock := at.AddDate(0, 0, -3) // a device clock days off changes nothing
	opens := deviceClock.Add(3 * time.Hour)
	fold(events.Keys{Device: "a"}, events.WorkloadStatus{Namespace: "lab", Deployment: "web", UID: "u", Generation: 1, RevisionID: "1-web",
		Phase: events.WorkloadPending, Error: "waiting for the maintenance window", Since: deviceClock, WindowOpens: &opens}, at.Add(5*time.Second))
	fold(events.Keys{Device: "b"}, events.WorkloadStatus{Namespace: "lab", Deployment: "web", UID: "u", Generation: 1, RevisionID: "1-web",
		Phase: events.WorkloadPending, Error: "container engine unavailable, retrying", Since: deviceClock}, at.Add(6*time.Second))
	aOpens := at.Add(5*time.Second + 3*time.Hour)
	for _, tc := range []struct {
		name string
		now  time.Time
		want []string
	}{
		{"past the timeout the others are silent, the waiting target is not", at.Add(time.Hour + time.Minute), []string{"b", "c"}},
		{"within the timeout of its opening it is not silent", aOpens.Add(59 * time.Minute), []string{"b", "c"}},
		{"a timeout after its opening without a result it is silent", aOpens.Add(time.Hour), []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, rm := range silentTargets(ro, tc.now, time.Hour) {
				got = append(got, rm.Device)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("silent targets (-want +got):\n%s", diff)
			}
		})
	}
}

// TestABudgetKeepsAWaitingTargetInFlightWithoutFailingIt: with a
// disruption budget of one per group, a target waiting for its window
// holds its group's slot (it switches when the window opens, so the next
// is not handed meanwhile), is never failed, and is not silent before a
// target timeout after its window opened (ADR 0029).
func TestABudgetKeepsAWaitingTargetInFlightWithoutFailingIt(t *testing.T) {
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	var ro projections.Rollout
	fold := func(keys events.Keys, d events.Data, stored time.Time) {
		ev, err := events.New(keys, d, events.WithTime(stored))
		if err != nil {
			t.Fatal(err)
		}
		p := projections.NewStoredPayload(events.Record{Event: ev, Stored: stored})
		ro.FoldPayload(&p)
	}
	dep := events.Keys{Namespace: "lab", Name: "web"}
	fold(dep, events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "1-web", ScoreDigest: "sha256:web",
		Score: []byte(`{"type":"PodmanV0"}`), Targets: []string{"a", "b"}, Canaries: []string{},
		Plan: &events.RolloutPlan{Batches: []events.PlanBatch{{Size: 2, SuccessPercent: 100}},
			Budget: &events.DisruptionBudget{LabelKey: "site", MaxUnavailable: 1, Values: []string{"lyon"}}},
		TargetBatches: []int{1, 1}, TargetGroups: []int{0, 0},
		Window: &events.MaintenanceWindow{Start: "02:00", Duration: "2h"}}, at)
	decide := func(now time.Time) []events.Type {
		var out []events.Type
		for _, tr := range ro.NextAt(now) {
			fold(dep, tr, now)
			out = append(out, tr.EventType())
		}
		return out
	}
	decide(at)
	if got := ro.Released(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("the first wave handed %v, want [a]", got)
	}
	deviceClock := at.AddDate(0, 0, 2)
	opens := deviceClock.Add(3 * time.Hour)
	fold(events.Keys{Device: "a"}, events.WorkloadStatus{Namespace: "lab", Deployment: "web", UID: "u", Generation: 1, RevisionID: "1-web",
		Phase: events.WorkloadPending, Error: "waiting for the maintenance window", Since: deviceClock, WindowOpens: &opens}, at.Add(time.Second))
	later := at.Add(2 * time.Hour)
	if got := decide(later); len(got) != 0 {
		t.Errorf("while a waits the runner decided %v", got)
	}
	if got := ro.Released(); len(got) != 1 {
		t.Errorf("while a waits the budget handed %v", got)
	}
	if silent := silentTargets(ro, later, time.Hour); len(silent) != 0 {
		t.Errorf("silent while waiting: %+v", silent)
	}
	if c := ro.Counts(); c.Failed != 0 {
		t.Errorf("counts %+v", c)
	}
	if n, _ := ro.WindowWaiting(); n != 1 {
		t.Errorf("%d waiting, want 1", n)
	}
}

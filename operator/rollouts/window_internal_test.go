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

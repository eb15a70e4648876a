package projections_test

import (
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// TestATargetsTimeoutRunsFromItsHandingOrItsWindowsOpening is the rule the
// operator's target timeout and the what-if simulator share: a target's
// timeout runs from when it was handed the revision, or, for a target
// that waits for the revision's maintenance window, from the window's
// opening (ADR 0029); a device not handed it has no timeout running.
func TestATargetsTimeoutRunsFromItsHandingOrItsWindowsOpening(t *testing.T) {
	tests := []struct {
		name   string
		steps  []wstep
		device string
		want   time.Time
	}{
		{"a target not handed the revision yet has none",
			[]wstep{wrev(nightly, "a", "b"), wrep(5, "a", events.WorkloadPending, time.Hour)}, "a", time.Time{}},
		{"a device that is no target has none",
			[]wstep{wrev(nil, "a"), wrel(1)}, "z", time.Time{}},
		{"a target of a revision without a window runs from the release",
			[]wstep{wrev(nil, "a"), wrel(1), wrep(5, "a", events.WorkloadApplying, 0)}, "a", sec(1)},
		{"a target that waits for the window runs from its opening",
			[]wstep{wrev(nightly, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadPending, 3*time.Hour)}, "a", sec(5).Add(3 * time.Hour)},
		{"a target that claims an opening in the past runs from the release",
			[]wstep{wrev(nightly, "a", "b"), wrel(1), wrep(5, "a", events.WorkloadPending, -time.Hour)}, "a", sec(1)},
		{"a target that converged runs from the release",
			[]wstep{wrev(nightly, "a"), wrel(1), wrep(5, "a", events.WorkloadPending, 3*time.Hour),
				wrep(3*3600+10, "a", events.WorkloadConverged, 0)}, "a", sec(1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := foldWindow(t, tc.steps...)
			if got := r.TargetTimeoutFrom(tc.device); !got.Equal(tc.want) {
				t.Errorf("TargetTimeoutFrom(%q) = %s, want %s", tc.device, got, tc.want)
			}
		})
	}
}

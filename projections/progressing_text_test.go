package projections_test

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

// TestTheProgressingConditionQuotesADevicesTextEscaped: the Progressing
// condition's message quotes a device's text (the failure that paused the
// rollout, a waiting target's last error) with every hidden character
// escaped, on one line, and the waiting target's error cut without
// splitting an escape.
func TestTheProgressingConditionQuotesADevicesTextEscaped(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		paused     string
		waitingErr string
		reason     string
		want       *regexp.Regexp
	}{
		{"the failure that paused the rollout is escaped", "batch 1 failed: d1: " + poisontest.Hidden + "\nline 2", "", fleetv1.ReasonRolloutPaused,
			regexp.MustCompile(`paused: batch 1 failed: d1: v1\\u202egnp\.exe.*\\u000aline 2; the progress deadline`)},
		{"a waiting target's hidden characters are escaped", "", poisontest.Hidden, fleetv1.ReasonProgressDeadlineExceeded,
			regexp.MustCompile(`d2 Applying since 2026-01-01T00:00:00Z: v1\\u202egnp\.exe\\u202a`)},
		{"a waiting target's long error is cut between two escapes", "", strings.Repeat("\x1b", 100), fleetv1.ReasonProgressDeadlineExceeded,
			regexp.MustCompile(`d2 Applying since 2026-01-01T00:00:00Z: (\\u001b){33}…$`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := projections.Rollout{UID: "u1", Generation: 1, RevisionID: "1-abc", Targets: []string{"d2"}, Stage: projections.StageReleased,
				ReleasedAll: true, StageAt: t0, ProgressAt: t0, ProgressDeadline: time.Minute,
				Results: map[string]projections.DeviceResult{"d2": {Phase: events.WorkloadApplying, Error: tc.waitingErr, Since: t0}}}
			if tc.paused != "" {
				r.Paused, r.PausedBy, r.PauseReason = true, "rollout", tc.paused
			}
			st, ok := r.StatusAt(t0.Add(time.Hour), 0)
			if !ok {
				t.Fatal("no status")
			}
			c := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionProgressing)
			if c == nil || c.Reason != tc.reason {
				t.Fatalf("Progressing %+v, want reason %s", c, tc.reason)
			}
			if i := strings.IndexFunc(c.Message, events.Invisible); i >= 0 {
				t.Errorf("the message holds %U raw: %q", []rune(c.Message[i:])[0], c.Message)
			}
			if !tc.want.MatchString(c.Message) {
				t.Errorf("message %q, want it to match %s", c.Message, tc.want)
			}
		})
	}
}

package projections_test

import (
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

// succeeded is lab/api generation 1 ("rev"), every one of n targets
// converged.
func succeeded(n int) projections.Rollout {
	r := projections.Rollout{UID: "u1", Generation: 1, RevisionID: "rev", Stage: projections.StageSucceeded, StageAt: healthT0,
		Results: map[string]projections.DeviceResult{}}
	for i := range n {
		d := fmt.Sprintf("d%02d", i)
		r.Targets = append(r.Targets, d)
		r.Results[d] = projections.DeviceResult{Phase: events.WorkloadConverged}
	}
	return r
}

func TestTheDegradedConditionNamesTheDegradedDevicesAndChangesNothingElse(t *testing.T) {
	tests := []struct {
		name       string
		degraded   int
		status     metav1.ConditionStatus
		reason     string
		message    string
		listed     int
		transition time.Time
	}{
		{"no degraded device is False NoDegradedDevices", 0, metav1.ConditionFalse, fleetv1.ReasonNoDegradedDevices,
			"revision rev: no device reports a service crash-looping, OOM-killed, down or unhealthy", 0, healthT0},
		{"one degraded device is True ServicesDegraded naming it", 1, metav1.ConditionTrue, fleetv1.ReasonServicesDegraded,
			"1 of 40 devices degraded: d00 (api: CrashLoop, exited with code 2, 3 restarts in 5m0s)", 1, healthT0.Add(time.Second)},
		{"at most five devices are named", 7, metav1.ConditionTrue, fleetv1.ReasonServicesDegraded,
			"7 of 40 devices degraded: d00 (api: CrashLoop, exited with code 2, 3 restarts in 5m0s), d01 (api: CrashLoop, exited with code 2, 3 restarts in 5m0s), " +
				"d02 (api: CrashLoop, exited with code 2, 3 restarts in 5m0s), d03 (api: CrashLoop, exited with code 2, 3 restarts in 5m0s), " +
				"d04 (api: CrashLoop, exited with code 2, 3 restarts in 5m0s), and 2 more (see status.degraded)", 7, healthT0.Add(time.Second)},
		{"at most twenty devices are listed", 30, metav1.ConditionTrue, fleetv1.ReasonServicesDegraded, "", fleetv1.MaxDegradedListed, healthT0.Add(time.Second)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := succeeded(40)
			var h projections.Health
			for i := range tc.degraded {
				p := healthEv(t, events.TypeWorkloadDegraded, fmt.Sprintf("d%02d", i), 1, 1+i)
				h.Apply(&p)
			}
			plain, _ := r.StatusAt(healthT0, 0)
			st, ok := projections.DeploymentStatusAt(r, &h, healthT0, 0)
			if !ok {
				t.Fatal("no status")
			}
			c := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionDegraded)
			if c == nil {
				t.Fatal("no Degraded condition")
			}
			if c.Status != tc.status || c.Reason != tc.reason || c.ObservedGeneration != 1 || !c.LastTransitionTime.Time.Equal(tc.transition) {
				t.Errorf("Degraded %s %s generation %d at %s, want %s %s generation 1 at %s", c.Status, c.Reason, c.ObservedGeneration,
					c.LastTransitionTime, tc.status, tc.reason, tc.transition)
			}
			if tc.message != "" && c.Message != tc.message {
				t.Errorf("message %q\nwant %q", c.Message, tc.message)
			}
			if len(st.Degraded) != tc.listed || int(st.Counts.Degraded) != tc.degraded {
				t.Errorf("%d listed, counts.degraded %d; want %d and %d", len(st.Degraded), st.Counts.Degraded, tc.listed, tc.degraded)
			}
			// Health changes nothing of the rollout's own status.
			st.Conditions = slicesWithout(st.Conditions, fleetv1.ConditionDegraded)
			st.Degraded, st.Counts.Degraded = nil, 0
			if diff := cmp.Diff(plain, st); diff != "" {
				t.Errorf("the rollout's status changed (-StatusAt +DeploymentStatusAt):\n%s", diff)
			}
			if plain.Phase != fleetv1.PhaseSucceeded {
				t.Errorf("phase %s, want Succeeded", plain.Phase)
			}
		})
	}
}

func TestADegradedDeviceOnAnOlderRevisionIsNamedWithIt(t *testing.T) {
	r := succeeded(2)
	r.Generation, r.RevisionID = 2, "rev2"
	var h projections.Health
	p := healthEv(t, events.TypeWorkloadDegraded, "d01", 1, 1)
	h.Apply(&p)
	st, _ := projections.DeploymentStatusAt(r, &h, healthT0, 0)
	c := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionDegraded)
	if want := "1 of 2 devices degraded: d01 (api: CrashLoop, exited with code 2, 3 restarts in 5m0s; on revision rev)"; c.Message != want {
		t.Errorf("message %q, want %q", c.Message, want)
	}
	if c.ObservedGeneration != 2 {
		t.Errorf("observedGeneration %d, want the revision's, 2", c.ObservedGeneration)
	}
}

func TestAHostileDegradedReportReachesTheStatusEscapedAndBounded(t *testing.T) {
	r := succeeded(1)
	var h projections.Health
	p := healthEv(t, events.TypeWorkloadDegraded, "d00", 1, 1, func(d *events.WorkloadHealth) {
		d.Reason = strings.Repeat("\u202e", 1000)
		d.Services = []events.ServiceHealth{{Name: strings.Repeat("x\n", 10_000)}}
	})
	h.Apply(&p)
	st, _ := projections.DeploymentStatusAt(r, &h, healthT0, 0)
	d := st.Degraded[0]
	if len(d.Reason) > 256 || len(d.Message) > 256 || strings.ContainsAny(d.Reason+d.Message, "\u202e\n") {
		t.Errorf("reason of %d bytes, message of %d bytes, escaped %v", len(d.Reason), len(d.Message), !strings.ContainsAny(d.Reason+d.Message, "\u202e\n"))
	}
	if c := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionDegraded); len(c.Message) > projections.MaxConditionMessage || strings.Contains(c.Message, "\n") {
		t.Errorf("condition message of %d bytes", len(c.Message))
	}
}

func slicesWithout(cs []metav1.Condition, typ string) []metav1.Condition {
	var out []metav1.Condition
	for _, c := range cs {
		if c.Type != typ {
			out = append(out, c)
		}
	}
	return out
}

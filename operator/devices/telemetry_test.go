package devices

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

func TestLivenessAt(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		heartbeat time.Time
		want      fleetv1.Liveness
	}{
		{"no heartbeat ever is Unknown", time.Time{}, fleetv1.LivenessUnknown},
		{"a heartbeat younger than stale-after is Online", now.Add(-89 * time.Second), fleetv1.LivenessOnline},
		{"a heartbeat exactly stale-after old is Stale", now.Add(-90 * time.Second), fleetv1.LivenessStale},
		{"an old heartbeat is Stale", now.Add(-time.Hour), fleetv1.LivenessStale},
		{"a heartbeat from a clock ahead of ours is Online", now.Add(time.Second), fleetv1.LivenessOnline},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, livenessAt(tc.heartbeat, now, 90*time.Second)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestHeartbeatsWakeTheControllerOnlyWhenNotOnline(t *testing.T) {
	tel := newTelemetry(nil)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	const stale = 90 * time.Second
	steps := []struct {
		name string
		do   func() bool
		want bool
	}{
		{"the first heartbeat of a device wakes the controller", func() bool { return tel.heartbeat("d", t0) }, true},
		{"a heartbeat after the controller decided Online does not", func() bool {
			tel.decide("d", t0, stale)
			return tel.heartbeat("d", t0.Add(30*time.Second))
		}, false},
		{"a heartbeat after the controller decided Stale does", func() bool {
			l, _ := tel.decide("d", t0.Add(10*time.Minute), stale)
			return l == fleetv1.LivenessStale && tel.heartbeat("d", t0.Add(10*time.Minute))
		}, true},
		{"an older heartbeat delivered late does not move the last heartbeat back", func() bool {
			tel.heartbeat("d", t0)
			return tel.snapshot("d").heartbeat.Equal(t0.Add(10 * time.Minute))
		}, true},
		{"an inventory older than the one known is ignored", func() bool {
			tel.inventory("d", 7, eventsInventory("6.2"))
			return tel.inventory("d", 5, eventsInventory("6.1"))
		}, false},
	}
	for _, s := range steps {
		if got := s.do(); got != s.want {
			t.Errorf("%s: got %v, want %v", s.name, got, s.want)
		}
	}
}

func eventsInventory(kernel string) events.DeviceInventory {
	return events.DeviceInventory{OS: "debian-12", Arch: "arm64", Kernel: kernel, AgentVersion: "1.0.0"}
}

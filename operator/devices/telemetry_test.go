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
			tel.decide("d", t0, stale, connState{})
			return tel.heartbeat("d", t0.Add(30*time.Second))
		}, false},
		{"a heartbeat after the controller decided Stale does", func() bool {
			l, _ := tel.decide("d", t0.Add(10*time.Minute), stale, connState{})
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

// TestConnectionsDecideLiveness: with the servers' view of the connections
// (ADR 0032) a connected device is Online whatever its heartbeats, and
// one whose connection went is Stale stale-after after the later of that
// and its last heartbeat.
func TestConnectionsDecideLiveness(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	const stale = 90 * time.Second
	tests := []struct {
		name      string
		heartbeat time.Time
		conn      connState
		want      fleetv1.Liveness
		wantSeen  time.Time
	}{
		{"a device connected for an hour without a heartbeat is Online since it connected", time.Time{},
			connState{tracked: true, up: true, since: now.Add(-time.Hour)}, fleetv1.LivenessOnline, now.Add(-time.Hour)},
		{"a device whose connection went a minute ago is still Online", now.Add(-time.Hour),
			connState{tracked: true, since: now.Add(-time.Minute)}, fleetv1.LivenessOnline, now.Add(-time.Minute)},
		{"a device whose connection went stale-after ago is Stale", now.Add(-time.Hour),
			connState{tracked: true, since: now.Add(-stale)}, fleetv1.LivenessStale, now.Add(-stale)},
		{"a heartbeat later than the connection's end counts", now.Add(-time.Second),
			connState{tracked: true, since: now.Add(-time.Hour)}, fleetv1.LivenessOnline, now.Add(-time.Second)},
		{"a restarted operator that saw nothing of a device since keeps its recorded transition: Stale", time.Time{},
			connState{tracked: true, recorded: now.Add(-time.Hour)}, fleetv1.LivenessStale, now.Add(-time.Hour)},
		{"a device never seen connected nor heartbeating is Unknown", time.Time{},
			connState{tracked: true}, fleetv1.LivenessUnknown, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tel := newTelemetry(nil)
			if !tc.heartbeat.IsZero() {
				tel.heartbeat("d", tc.heartbeat)
			}
			l, seen := tel.decide("d", now, stale, tc.conn)
			if diff := cmp.Diff([]any{tc.want, tc.wantSeen}, []any{l, seen}); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// A connection closes and comes back every token lifetime: the Device's
// Online condition must read the same while the device is reconnecting
// as while it is connected, or every device would cost two status writes
// a lifetime (a write is made only when the status the controller decides
// differs from the Device's).
func TestTheOnlineConditionDoesNotChangeWhileADeviceReconnects(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	r := &Reconciler{StaleAfter: 90 * time.Second}
	d := &fleetv1.Device{}
	connected := r.onlineCondition(d, fleetv1.LivenessOnline, now, connState{tracked: true, up: true, since: now.Add(-10 * time.Minute)})
	reconnecting := r.onlineCondition(d, fleetv1.LivenessOnline, now, connState{tracked: true, since: now.Add(-time.Second)})
	if diff := cmp.Diff(connected, reconnecting); diff != "" {
		t.Errorf("the Online condition changes when the connection goes for a moment (-connected +reconnecting):\n%s", diff)
	}
	stale := r.onlineCondition(d, fleetv1.LivenessStale, now, connState{tracked: true, since: now.Add(-2 * time.Minute)})
	if stale.Status != "False" || stale.Reason != fleetv1.ReasonDisconnected {
		t.Errorf("a Stale device's condition is %s/%s, want False/%s", stale.Status, stale.Reason, fleetv1.ReasonDisconnected)
	}
}

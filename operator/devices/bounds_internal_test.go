package devices

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

func numberedLabels(n int) map[string]string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprintf("k%04d", i)] = "v"
	}
	return m
}

func TestBoundReportKeepsWhatADeviceMayPutOnItsDevice(t *testing.T) {
	long := strings.Repeat("x", 63)
	tests := []struct {
		name       string
		in         events.DeviceInventory
		wantLabels int
		wantFirst  string // the last kept key in sorted order ("" no check)
		wantInv    events.DeviceInventory
		wantTrims  []string
	}{
		{"a report within bounds is kept as it is",
			events.DeviceInventory{OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64", Kernel: "6.1.0-18-arm64", AgentVersion: "v1.4.2", Labels: numberedLabels(3)},
			3, "", events.DeviceInventory{OS: "Debian GNU/Linux 12 (bookworm)", Arch: "arm64", Kernel: "6.1.0-18-arm64", AgentVersion: "v1.4.2"}, nil},
		{"3,000 labels keep the first 64 keys in sorted order",
			events.DeviceInventory{Labels: numberedLabels(3000)}, MaxReportedLabels, "k0063", events.DeviceInventory{},
			[]string{"dropped 2,936 of 3,000 reported labels (at most 64 labels, 4,096 bytes)"}},
		{"long labels are kept up to 4,096 bytes in all",
			events.DeviceInventory{Labels: func() map[string]string {
				m := map[string]string{}
				for i := range 60 {
					m[fmt.Sprintf("%s%03d", long[:60], i)] = long
				}
				return m
			}()}, 32, "", events.DeviceInventory{},
			[]string{"dropped 28 of 60 reported labels (at most 64 labels, 4,096 bytes)"}},
		{"reserved and invalid labels are left out and not counted as dropped",
			events.DeviceInventory{Labels: map[string]string{"blacklist": "true", "fleet.nationtech.io/x": "y", "bad key": "v", "zone": "a"}},
			1, "zone", events.DeviceInventory{}, nil},
		{"a 120 KiB kernel string is cut to 256 bytes and marked",
			events.DeviceInventory{Kernel: strings.Repeat("k", 120<<10)}, 0, "",
			events.DeviceInventory{Kernel: strings.Repeat("k", MaxInventoryField-len("…")) + "…"},
			[]string{"inventory.kernel truncated from 122,880 to 256 bytes"}},
		{"a cut inside a rune moves before it",
			events.DeviceInventory{OS: "a" + strings.Repeat("é", 200)}, 0, "",
			events.DeviceInventory{OS: "a" + strings.Repeat("é", 126) + "…"},
			[]string{"inventory.os truncated from 401 to 256 bytes"}},
		{"a right-to-left override in the agent version is escaped",
			events.DeviceInventory{AgentVersion: "v1\u202egnp.exe", Arch: "arm\u200b64"}, 0, "",
			events.DeviceInventory{AgentVersion: `v1\u202egnp.exe`, Arch: `arm\u200b64`}, nil},
		{"a reported IANA time zone is kept",
			events.DeviceInventory{Arch: "arm64", TimeZone: "Europe/Paris"}, 0, "", events.DeviceInventory{Arch: "arm64", TimeZone: "Europe/Paris"}, nil},
		{"a time zone that is a path out of the tz database is dropped and named",
			events.DeviceInventory{Arch: "arm64", TimeZone: "../../../etc/passwd"}, 0, "", events.DeviceInventory{Arch: "arm64"},
			[]string{"inventory.timeZone of 19 bytes ignored: not an IANA time zone of the tz database"}},
		{"a long time zone with an escape is dropped, and not shown",
			events.DeviceInventory{TimeZone: "\x1b]52;c;" + strings.Repeat("A", 5000)}, 0, "", events.DeviceInventory{},
			[]string{"inventory.timeZone of 5,007 bytes ignored: not an IANA time zone of the tz database"}},
		{"Local, the operator's own zone, is dropped",
			events.DeviceInventory{TimeZone: "Local"}, 0, "", events.DeviceInventory{},
			[]string{"inventory.timeZone of 5 bytes ignored: not an IANA time zone of the tz database"}},
		{"every field over its bound is named",
			events.DeviceInventory{OS: strings.Repeat("o", 300), Arch: strings.Repeat("a", 300), Kernel: strings.Repeat("k", 300),
				AgentVersion: strings.Repeat("\u202e", 100), Labels: numberedLabels(65)}, MaxReportedLabels, "", events.DeviceInventory{
				OS: strings.Repeat("o", 253) + "…", Arch: strings.Repeat("a", 253) + "…", Kernel: strings.Repeat("k", 253) + "…",
				AgentVersion: strings.Repeat(`\u202e`, 42) + "…"},
			[]string{"dropped 1 of 65 reported labels (at most 64 labels, 4,096 bytes)", "inventory.os truncated from 300 to 256 bytes",
				"inventory.arch truncated from 300 to 256 bytes", "inventory.kernel truncated from 300 to 256 bytes",
				"inventory.agentVersion truncated from 300 to 256 bytes"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := boundReport(tc.in)
			if len(got.Labels) != tc.wantLabels {
				t.Errorf("%d labels kept, want %d", len(got.Labels), tc.wantLabels)
			}
			if _, ok := got.Labels[tc.wantFirst]; tc.wantFirst != "" && !ok {
				t.Errorf("label %s not kept: %v", tc.wantFirst, got.Labels)
			}
			inv := got.DeviceInventory
			inv.Labels = nil
			if diff := cmp.Diff(tc.wantInv, inv); diff != "" {
				t.Errorf("inventory (-want +got):\n%s", diff)
			}
			var msgs []string
			for _, tr := range got.trims {
				msgs = append(msgs, tr.message)
			}
			if diff := cmp.Diff(tc.wantTrims, msgs); diff != "" {
				t.Errorf("trims (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTheWorstStatusAReportCanCauseFitsTheBound(t *testing.T) {
	// Two reports of the longest valid labels (a 253-byte prefix, a
	// 63-byte name and a 63-byte value) with no key in common: while the
	// labels move from the first to the second, status.reportedLabels
	// holds what both kept. Every inventory string is at its bound.
	prefix := strings.Repeat("p", 61) + "." + strings.Repeat("q", 61) + "." + strings.Repeat("r", 61) + "." + strings.Repeat("s", 63)
	report := func(name string) events.DeviceInventory {
		labels := map[string]string{}
		for i := range 4 * MaxReportedLabels {
			labels[fmt.Sprintf("%s/%s%s%03d", prefix, name, strings.Repeat("n", 59), i)] = strings.Repeat("v", 63)
		}
		worst := strings.Repeat("\u202e", 1000)
		return events.DeviceInventory{OS: worst, Arch: worst, Kernel: worst, AgentVersion: worst, Labels: labels}
	}
	b1, b2 := boundReport(report("a")), boundReport(report("b"))
	owned := claimedLabels(b1.Labels, b2.Labels)
	if len(owned) != len(b1.Labels)+len(b2.Labels) {
		t.Fatalf("the two reports share keys: %d owned of %d + %d", len(owned), len(b1.Labels), len(b2.Labels))
	}
	d := &fleetv1.Device{}
	st := fleetv1.DeviceStatus{
		Liveness: fleetv1.LivenessStale, LastHeartbeat: &metav1.Time{},
		Inventory:      &fleetv1.DeviceInventory{OS: b2.OS, Arch: b2.Arch, Kernel: b2.Kernel, AgentVersion: b2.AgentVersion},
		ReportedLabels: owned,
		Conditions: []metav1.Condition{
			deviceCondition(d, fleetv1.ConditionOnline, metav1.ConditionFalse, fleetv1.ReasonHeartbeatMissed, "no heartbeat for 1m30s since 2026-12-04T23:59:59Z"),
			deviceCondition(d, fleetv1.ConditionIdentityRegistered, metav1.ConditionFalse, fleetv1.ReasonIdentityInUse, strings.Repeat("m", 400)),
			trimmedCondition(d, b2.trims),
		},
	}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > MaxDeviceStatusBytes {
		t.Errorf("the worst status is %d bytes, over the %d-byte bound", len(b), MaxDeviceStatusBytes)
	}
	t.Logf("worst status: %d bytes of %d", len(b), MaxDeviceStatusBytes)
}

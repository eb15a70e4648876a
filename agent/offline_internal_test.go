package agent

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
)

func TestOfflineReportsAreCoalescedAndBounded(t *testing.T) {
	d := &daemon{}
	for i := range 10 {
		d.hold("device.heartbeat", nats.NewMsg(fmt.Sprint("hb", i)))
	}
	d.hold("workload/lab/a", nats.NewMsg("a1"))
	d.hold("workload/lab/a", nats.NewMsg("a2"))
	d.hold("workload/lab/b", nats.NewMsg("b1"))
	if len(d.offlineKeys) != 3 {
		t.Fatalf("%d held reports, want 3 (one heartbeat, one status per Deployment)", len(d.offlineKeys))
	}
	if d.offline["device.heartbeat"].Subject != "hb9" || d.offline["workload/lab/a"].Subject != "a2" {
		t.Error("coalescing kept an older report instead of the latest")
	}
	for i := range MaxOfflineReports + 10 {
		d.hold(fmt.Sprint("command/", i), nats.NewMsg("c"))
	}
	if len(d.offlineKeys) != MaxOfflineReports || len(d.offline) != MaxOfflineReports {
		t.Errorf("%d held, want the bound %d", len(d.offlineKeys), MaxOfflineReports)
	}
	if _, ok := d.offline["device.heartbeat"]; ok {
		t.Error("the oldest report was not the one dropped")
	}
}

func TestAHealthReportIsHeldOfflinePerDeployment(t *testing.T) {
	degraded := events.NewWorkloadHealth(events.TypeWorkloadDegraded, events.WorkloadHealth{Namespace: "lab", Deployment: "a"})
	recovered := events.NewWorkloadHealth(events.TypeWorkloadRecovered, events.WorkloadHealth{Namespace: "lab", Deployment: "a"})
	other := events.NewWorkloadHealth(events.TypeWorkloadDegraded, events.WorkloadHealth{Namespace: "lab", Deployment: "b"})
	if offlineKey(degraded) != "health/lab/a" || offlineKey(recovered) != offlineKey(degraded) || offlineKey(other) == offlineKey(degraded) {
		t.Errorf("keys %q %q %q: want one per Deployment, whatever the type", offlineKey(degraded), offlineKey(recovered), offlineKey(other))
	}
	if offlineKey(degraded) == offlineKey(events.WorkloadStatus{Namespace: "lab", Deployment: "a"}) {
		t.Error("a health report replaces the Deployment's workload report offline")
	}
	if offlineKey(events.DeviceContainers{}) != string(events.TypeDeviceContainers) {
		t.Error("container snapshots are not coalesced into the latest")
	}
}

package agent

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
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

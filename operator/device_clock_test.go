package operator_test

import (
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// reportAt publishes a device report whose event time is at: the device's
// own clock, which the operator must never use to order reports.
func (e *devEnv) reportAt(id string, data events.Data, at time.Time) {
	e.t.Helper()
	ev, err := events.New(events.Keys{Device: id}, data, events.WithTime(at))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.Report(e.ctx, ev); err != nil {
		e.t.Fatal(err)
	}
}

// TestDeviceClocksNeverOrderTelemetry: a device without a real-time clock
// reports times ten years behind or ahead; liveness follows the time the
// server stored each heartbeat and the inventory follows stream order.
func TestDeviceClocksNeverOrderTelemetry(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rtc")
	e.create(id, nil)
	e.start(3 * time.Second)
	decade := 10 * 365 * 24 * time.Hour

	t.Run("a heartbeat from a clock ten years behind makes the device Online now", func(t *testing.T) {
		began := time.Now()
		beat := func() { e.reportAt(id, events.DeviceHeartbeat{AgentVersion: "1.0.0"}, time.Now().Add(-decade)) }
		beat()
		d := e.waitDevice(id, "Online", func(d *fleetv1.Device) bool {
			if d.Status.Liveness != fleetv1.LivenessOnline {
				beat() // a slow start may have decided the first beat stale already
				return false
			}
			return true
		})
		if hb := d.Status.LastHeartbeat; hb == nil || hb.Time.Before(began.Add(-time.Minute)) {
			t.Errorf("lastHeartbeat %v, want the time the server stored it (after %s)", hb, began.Add(-time.Minute))
		}
	})
	t.Run("a heartbeat from a clock ten years ahead does not keep the device Online", func(t *testing.T) {
		e.reportAt(id, events.DeviceHeartbeat{AgentVersion: "1.0.0"}, time.Now().Add(decade))
		e.waitDevice(id, "Stale once the server's stale-after passed", func(d *fleetv1.Device) bool {
			return d.Status.Liveness == fleetv1.LivenessStale
		})
	})
	t.Run("the inventory stored last wins whatever its clock says", func(t *testing.T) {
		e.reportAt(id, events.DeviceInventory{OS: "debian-12", Arch: "arm64", Kernel: "6.6.0", AgentVersion: "1.0.0"}, time.Now().Add(decade))
		e.waitDevice(id, "kernel 6.6.0", func(d *fleetv1.Device) bool {
			return d.Status.Inventory != nil && d.Status.Inventory.Kernel == "6.6.0"
		})
		e.reportAt(id, events.DeviceInventory{OS: "debian-12", Arch: "arm64", Kernel: "6.1.0", AgentVersion: "1.0.1"}, time.Now().Add(-decade))
		e.waitDevice(id, "kernel 6.1.0 of the later report", func(d *fleetv1.Device) bool {
			return d.Status.Inventory != nil && d.Status.Inventory.Kernel == "6.1.0" && d.Status.Inventory.AgentVersion == "1.0.1"
		})
	})
}

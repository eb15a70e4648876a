package operator_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// An operator that starts over Devices already registered reads the
// fleet-identity bucket in one pass, not with one get per Device (issue
// #39: the cold start at 100,000 Devices). Counted on the server: a
// subscriber on the bucket's direct-get subjects sees every get.
func TestARestartedDeviceControllerReadsTheIdentityBucketInOnePass(t *testing.T) {
	e := newDevEnv(t)
	const devices = 30
	ids := make([]string, devices)
	for i := range ids {
		ids[i] = e.id(fmt.Sprintf("cold-%d", i))
		e.create(ids[i], nil)
	}
	stop := e.start(time.Minute)
	for _, id := range ids {
		e.waitDevice(id, "registered", func(d *fleetv1.Device) bool {
			c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionIdentityRegistered)
			return c != nil && c.Status == metav1.ConditionTrue
		})
	}
	stop()

	var gets atomic.Int64
	sub, err := e.store.JetStream().Conn().Subscribe("$JS.API.DIRECT.GET.KV_fleet-identity.>", func(*nats.Msg) { gets.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := e.store.JetStream().Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	before := deviceReconciles(t).count
	e.start(time.Minute)
	// Every Device is reconciled once at the start.
	testenv.Eventually(t, "a reconcile of every Device", time.Minute, func() bool { return deviceReconciles(t).count-before >= devices })
	// A change after the restart is still seen: the last Device is
	// quarantined, and its identity entry says so.
	quarantined := e.get(ids[devices-1])
	quarantined.Labels = map[string]string{fleetv1.LabelBlacklist: "true"}
	if err := e.c.Update(e.ctx, quarantined); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the quarantine in fleet-identity", time.Minute, func() bool {
		v, ok := e.identityOf(quarantined.Spec.IdentitySubject)
		return ok && v.Quarantined
	})
	if n := gets.Load(); n >= devices/2 {
		t.Errorf("%d direct gets of fleet-identity for %d Devices after the restart, want the bucket read in one pass (a few gets at most)", n, devices)
	}
}

// An operator that starts over devices that reported already reads their
// last heartbeats, inventories and container reports from its one
// telemetry follow of each stream (the last message per subject, read to
// its end before the reconciles use it), not with direct gets per Device
// (issue #39: the cold start at 100,000 Devices). A report stored while no
// operator ran is what the restarted one projects; a device that never
// reported costs no get either. Counted on the server: a subscriber on the
// streams' direct-get subjects sees every get.
func TestARestartedDeviceControllerReadsTheReportsInOnePass(t *testing.T) {
	e := newDevEnv(t)
	const devices = 30
	ids := make([]string, devices)
	inventory := func(site string) events.DeviceInventory {
		return events.DeviceInventory{OS: "debian-12", Arch: "arm64", Kernel: "6.1.0", AgentVersion: "1.0.0", Labels: map[string]string{"site": site}}
	}
	// A third of the devices beat and send an inventory, a third only
	// beat, a third never reported.
	for i := range ids {
		ids[i] = e.id(fmt.Sprintf("warm-%d", i))
		e.create(ids[i], nil)
		switch i % 3 {
		case 0:
			e.report(ids[i], inventory("paris"))
			e.heartbeat(ids[i])
		case 1:
			e.heartbeat(ids[i])
		}
	}
	// Heartbeats are sent once, at the start: a stale bound no slow
	// machine reaches.
	stop := e.start(10 * time.Minute)
	for i, id := range ids {
		e.waitDevice(id, "projected", func(d *fleetv1.Device) bool {
			switch i % 3 {
			case 0:
				return d.Status.Liveness == fleetv1.LivenessOnline && d.Labels["site"] == "paris"
			case 1:
				return d.Status.Liveness == fleetv1.LivenessOnline
			}
			c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionIdentityRegistered)
			return c != nil && c.Status == metav1.ConditionTrue
		})
	}
	stop()
	// While no operator runs, the first device moves.
	e.report(ids[0], inventory("lyon"))

	var gets atomic.Int64
	nc := e.store.JetStream().Conn()
	for _, stream := range []string{events.StreamLiveness, events.StreamTelemetry} {
		sub, err := nc.Subscribe("$JS.API.DIRECT.GET."+stream+".>", func(*nats.Msg) { gets.Add(1) })
		if err != nil {
			t.Fatal(err)
		}
		defer sub.Unsubscribe()
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	before := deviceReconciles(t).count
	e.start(10 * time.Minute)
	testenv.Eventually(t, "a reconcile of every Device", time.Minute, func() bool { return deviceReconciles(t).count-before >= devices })
	e.waitDevice(ids[0], "the inventory stored while no operator ran", func(d *fleetv1.Device) bool { return d.Labels["site"] == "lyon" })
	if n := gets.Load(); n >= devices/2 {
		t.Errorf("%d direct gets of the report streams for %d Devices after the restart, want their last reports read in one pass (a few gets at most)", n, devices)
	}
	for i, id := range ids {
		if d := e.get(id); i%3 < 2 && d.Status.Liveness != fleetv1.LivenessOnline {
			t.Errorf("Device %s is %s after the restart, want Online", id, d.Status.Liveness)
		}
	}
}

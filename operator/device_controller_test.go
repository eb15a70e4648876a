package operator_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

// devEnv is one Device test's world: a namespace on the shared API server,
// an embedded JetStream, and operators running the Device controller.
type devEnv struct {
	t        *testing.T
	ctx      context.Context
	srv      *kubeapi.Server
	c        client.WithWatch
	store    *events.Store
	identity jetstream.KeyValue
	intent   jetstream.KeyValue
	ns       string
	// skips, when set, counts the records the operators skip.
	skips *events.SkipCounter
	// metrics, when set, are the operators' metrics.
	metrics *operator.Metrics
	// workers is the operators' Options.DeviceWorkers (0: the default).
	workers int
	// now, when set, is the operators' Options.DeviceNow.
	now func() time.Time
}

func newDevEnv(t *testing.T) *devEnv {
	t.Helper()
	ctx, srv, c, ns := cluster(t, "devices")
	_, st := natstest.Provisioned(t)
	identity, err := st.JetStream().KeyValue(ctx, events.BucketIdentity)
	if err != nil {
		t.Fatal(err)
	}
	intent, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	return &devEnv{t: t, ctx: ctx, srv: srv, c: c, store: st, identity: identity, intent: intent, ns: ns}
}

// start runs an operator with the Device controller until stop is called
// or the test ends.
func (e *devEnv) start(staleAfter time.Duration) (stop func()) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	go func() {
		done <- operator.Run(ctx, operator.Options{RESTConfig: e.srv.RESTConfig(), Store: e.store, Reader: e.store, IntentKV: e.intent,
			Devices: e.store, StaleAfter: staleAfter, Logger: logger, SeveralPerProcess: true, Skips: e.skips, Metrics: e.metrics,
			DeviceWorkers: e.workers, DeviceNow: e.now})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("operator.Run: %v", err)
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// id makes a device id unique on the shared API server (ids are unique
// across namespaces).
func (e *devEnv) id(name string) string { return e.ns + "-" + name }

func (e *devEnv) create(id string, labels map[string]string) *fleetv1.Device {
	e.t.Helper()
	d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: e.ns, Labels: labels},
		Spec: fleetv1.DeviceSpec{IdentitySubject: "sub-" + id}}
	if err := e.c.Create(e.ctx, d); err != nil {
		e.t.Fatal(err)
	}
	return d
}

func (e *devEnv) get(id string) *fleetv1.Device {
	e.t.Helper()
	var d fleetv1.Device
	if err := e.c.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: id}, &d); err != nil {
		e.t.Fatal(err)
	}
	return &d
}

// report publishes a device report as the agent would (never
// acknowledged) and waits until it is stored.
func (e *devEnv) report(id string, data events.Data) {
	e.t.Helper()
	ev, err := events.New(events.Keys{Device: id}, data)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.Report(e.ctx, ev); err != nil {
		e.t.Fatal(err)
	}
}

func (e *devEnv) heartbeat(id string) { e.report(id, events.DeviceHeartbeat{AgentVersion: "1.0.0"}) }

// label sets (value non-empty) or removes an admin label, as kubectl label
// does.
func (e *devEnv) label(id, key, value string) {
	e.t.Helper()
	var v any = value
	if value == "" {
		v = nil
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%s}}}`, key, jsonValue(v))
	d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: e.ns}}
	if err := e.c.Patch(e.ctx, d, client.RawPatch(types.MergePatchType, patch)); err != nil {
		e.t.Fatal(err)
	}
}

func jsonValue(v any) string {
	if v == nil {
		return "null"
	}
	return fmt.Sprintf("%q", v)
}

// waitDevice polls the Device until cond holds or the deadline passes.
func (e *devEnv) waitDevice(id, what string, cond func(*fleetv1.Device) bool) *fleetv1.Device {
	e.t.Helper()
	var d *fleetv1.Device
	if err := testenv.Poll(e.ctx, 60*time.Second, func() bool { d = e.get(id); return cond(d) }); err != nil {
		e.t.Fatalf("%v waiting for %s of Device %s; status %+v labels %v", err, what, id, d.Status, d.Labels)
	}
	return d
}

// identityOf reads the fleet-identity value of an identity subject through
// the auth callout's own reader (authcallout.KVIdentities), so every value
// the operator writes is proven to be one the callout decides with; ok is
// false when there is no key.
func (e *devEnv) identityOf(subject string) (events.IdentityEntry, bool) {
	e.t.Helper()
	_, err := e.identity.Get(e.ctx, subject)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return events.IdentityEntry{}, false
	}
	if err != nil {
		e.t.Fatal(err)
	}
	v, err := authcallout.NewKVIdentities(e.store.JetStream()).Lookup(e.ctx, subject)
	if err != nil {
		e.t.Fatalf("the callout refuses the identity value of %s: %v", subject, err)
	}
	return v, true
}

func (e *devEnv) waitIdentity(what, subject string, want *events.IdentityEntry) {
	e.t.Helper()
	var got events.IdentityEntry
	var ok bool
	err := testenv.Poll(e.ctx, 60*time.Second, func() bool {
		got, ok = e.identityOf(subject)
		return (want == nil && !ok) || (want != nil && ok && got == *want)
	})
	if err != nil {
		e.t.Fatalf("%v waiting for %s: identity %s is %+v (present %v), want %+v", err, what, subject, got, ok, want)
	}
}

func online(d *fleetv1.Device) *metav1.Condition {
	return meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionOnline)
}

func TestDeviceStatusAndLabelsFollowReports(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-1")
	e.create(id, map[string]string{"role": "analyzer"})
	e.start(time.Minute)

	d := e.waitDevice(id, "Unknown liveness", func(d *fleetv1.Device) bool { return d.Status.Liveness == fleetv1.LivenessUnknown })
	if c := online(d); c == nil || c.Status != metav1.ConditionUnknown || c.Reason != fleetv1.ReasonNoHeartbeat {
		t.Errorf("Online condition before any heartbeat: %+v", c)
	}

	e.report(id, events.DeviceInventory{OS: "debian-12", Arch: "arm64", Kernel: "6.1.0", AgentVersion: "1.0.0",
		Labels: map[string]string{"zone": "lab-a", "canary": "true", "role": "other"}})
	d = e.waitDevice(id, "the inventory", func(d *fleetv1.Device) bool {
		return d.Status.Inventory != nil && d.Labels["zone"] == "lab-a" && len(d.Status.ReportedLabels) == 2
	})
	if diff := cmp.Diff(&fleetv1.DeviceInventory{OS: "debian-12", Arch: "arm64", Kernel: "6.1.0", AgentVersion: "1.0.0"}, d.Status.Inventory); diff != "" {
		t.Errorf("inventory (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"zone": "lab-a", "canary": "true"}, d.Status.ReportedLabels); diff != "" {
		t.Errorf("reportedLabels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"zone": "lab-a", "canary": "true", "role": "analyzer"}, d.Labels); diff != "" {
		t.Errorf("labels: reported ones mirrored, the admin's role untouched (-want +got):\n%s", diff)
	}

	e.heartbeat(id)
	d = e.waitDevice(id, "Online", func(d *fleetv1.Device) bool { return d.Status.Liveness == fleetv1.LivenessOnline })
	if c := online(d); c == nil || c.Status != metav1.ConditionTrue || c.Reason != fleetv1.ReasonHeartbeating {
		t.Errorf("Online condition: %+v", c)
	}
	if d.Status.LastHeartbeat == nil {
		t.Error("lastHeartbeat not set by the transition to Online")
	}

	t.Run("a label no longer reported is removed, and the admin's label stays", func(t *testing.T) {
		e.report(id, events.DeviceInventory{OS: "debian-12", Arch: "arm64", Kernel: "6.1.0", AgentVersion: "1.0.0",
			Labels: map[string]string{"canary": "true"}})
		d := e.waitDevice(id, "zone removed", func(d *fleetv1.Device) bool {
			_, zone := d.Labels["zone"]
			return !zone && len(d.Status.ReportedLabels) == 1
		})
		if diff := cmp.Diff(map[string]string{"canary": "true", "role": "analyzer"}, d.Labels); diff != "" {
			t.Errorf("labels (-want +got):\n%s", diff)
		}
	})
}

func TestReportsNeverTouchReservedLabels(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-1")
	e.create(id, map[string]string{"blacklist": "true"})
	e.start(time.Minute)
	e.waitIdentity("the quarantined identity", "sub-"+id, &events.IdentityEntry{Device: id, Quarantined: true})

	// The device tries to clear its quarantine and claim control-plane labels.
	e.report(id, events.DeviceInventory{OS: "debian-12", Arch: "amd64", Kernel: "6.1.0", AgentVersion: "1.0.0",
		Labels: map[string]string{"blacklist": "false", "fleet.nationtech.io/owner": "me", "zone": "b"}})
	d := e.waitDevice(id, "the inventory", func(d *fleetv1.Device) bool { return d.Labels["zone"] == "b" })
	if diff := cmp.Diff(map[string]string{"blacklist": "true", "zone": "b"}, d.Labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"zone": "b"}, d.Status.ReportedLabels); diff != "" {
		t.Errorf("reportedLabels (-want +got):\n%s", diff)
	}
	// A later report without blacklist cannot remove the admin's label.
	e.report(id, events.DeviceInventory{OS: "debian-12", Arch: "amd64", Kernel: "6.1.1", AgentVersion: "1.0.0"})
	d = e.waitDevice(id, "the second inventory", func(d *fleetv1.Device) bool {
		return d.Status.Inventory != nil && d.Status.Inventory.Kernel == "6.1.1" && d.Labels["zone"] == ""
	})
	if diff := cmp.Diff(map[string]string{"blacklist": "true"}, d.Labels); diff != "" {
		t.Errorf("labels after the device stopped reporting (-want +got):\n%s", diff)
	}
	if v, ok := e.identityOf("sub-" + id); !ok || !v.Quarantined {
		t.Errorf("identity %+v (present %v): the device must stay quarantined", v, ok)
	}

	t.Run("a device reporting blacklist on an unquarantined Device is ignored", func(t *testing.T) {
		id2 := e.id("rpi-2")
		e.create(id2, nil)
		e.report(id2, events.DeviceInventory{OS: "debian-12", Arch: "amd64", Kernel: "6.1.0", AgentVersion: "1.0.0",
			Labels: map[string]string{"blacklist": "true", "canary": "true"}})
		d := e.waitDevice(id2, "the inventory", func(d *fleetv1.Device) bool { return d.Labels["canary"] == "true" })
		if _, q := d.Labels["blacklist"]; q {
			t.Errorf("labels %v: a report added blacklist", d.Labels)
		}
		e.waitIdentity("the identity", "sub-"+id2, &events.IdentityEntry{Device: id2})
	})
}

// A reconcile may read a Device from a cache that is behind the API server
// (the telemetry consumer starts reconciles no watch event brought). The
// status it decides must not overwrite one written after the copy it read:
// here the stale copy would release the reported label zone that a newer
// status claimed and a newer label update set, and zone would be taken for
// an admin's label for good.
func TestAStatusDecidedFromAStaleDeviceIsNotWritten(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-1")
	e.create(id, nil)
	stale := e.get(id)

	unknown := []metav1.Condition{{Type: fleetv1.ConditionOnline, Status: metav1.ConditionUnknown, Reason: fleetv1.ReasonNoHeartbeat, Message: "no heartbeat received yet"}}
	claimed := fleetv1.DeviceStatus{Liveness: fleetv1.LivenessUnknown, ReportedLabels: map[string]string{"zone": "b"}, Conditions: unknown}
	if err := operator.ApplyDeviceStatus(e.ctx, e.c, stale, claimed); err != nil {
		t.Fatal(err)
	}
	fresh := e.get(id)
	fresh.Labels = map[string]string{"zone": "b"}
	if err := e.c.Update(e.ctx, fresh); err != nil {
		t.Fatal(err)
	}

	released := fleetv1.DeviceStatus{Liveness: fleetv1.LivenessUnknown, Inventory: &fleetv1.DeviceInventory{Kernel: "6.1.1"}, Conditions: unknown}
	err := operator.ApplyDeviceStatus(e.ctx, e.c, stale, released)
	if !apierrors.IsConflict(err) {
		t.Fatalf("status decided from a stale Device: error %v, want a Conflict", err)
	}
	d := e.get(id)
	if diff := cmp.Diff(map[string]string{"zone": "b"}, d.Status.ReportedLabels); diff != "" {
		t.Errorf("reportedLabels after the refused write (-want +got):\n%s", diff)
	}
	if err := operator.ApplyDeviceStatus(e.ctx, e.c, d, released); err != nil {
		t.Errorf("status decided from the current Device: %v", err)
	}
}

func TestDeviceGoesStaleWithoutHeartbeatsAndBackOnline(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-1")
	e.create(id, nil)
	e.start(2 * time.Second)
	e.heartbeat(id)
	e.waitDevice(id, "Online", e.beatUntilOnline(id))
	d := e.waitDevice(id, "Stale", func(d *fleetv1.Device) bool { return d.Status.Liveness == fleetv1.LivenessStale })
	if c := online(d); c == nil || c.Status != metav1.ConditionFalse || c.Reason != fleetv1.ReasonHeartbeatMissed {
		t.Errorf("Online condition when stale: %+v", c)
	}
	e.heartbeat(id)
	e.waitDevice(id, "Online again", e.beatUntilOnline(id))
}

// beatUntilOnline is a condition of waitDevice: the Device is Online, and
// while it is not, the device beats again. With a stale-after of seconds,
// a machine slow to start the controller or to read one heartbeat may
// first decide that beat stale already; the product's promise is that a
// device heartbeating is Online.
func (e *devEnv) beatUntilOnline(id string) func(*fleetv1.Device) bool {
	return func(d *fleetv1.Device) bool {
		if d.Status.Liveness == fleetv1.LivenessOnline {
			return true
		}
		e.heartbeat(id)
		return false
	}
}

func TestHeartbeatsDoNotWriteTheDevice(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-1")
	e.create(id, nil)
	e.start(time.Minute)
	inv := events.DeviceInventory{OS: "debian-12", Arch: "arm64", Kernel: "6.1.0", AgentVersion: "1.0.0", Labels: map[string]string{"zone": "a"}}
	e.report(id, inv)
	e.heartbeat(id)
	d := e.waitDevice(id, "Online with labels", func(d *fleetv1.Device) bool {
		return d.Status.Liveness == fleetv1.LivenessOnline && maps(d.Status.ReportedLabels)["zone"] == "a" && d.Labels["zone"] == "a"
	})

	w, err := e.c.Watch(e.ctx, &fleetv1.DeviceList{}, client.InNamespace(e.ns),
		&client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", id), Raw: &metav1.ListOptions{ResourceVersion: d.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// Heartbeats paced over more than two seconds, so a controller that
	// wrote lastHeartbeat (second resolution) per heartbeat would be seen.
	const heartbeats = 45
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range heartbeats {
		e.heartbeat(id)
		<-tick.C
	}
	// The inventory is stored after every heartbeat, and the operator reads
	// the stream in order: once its status change is seen, every heartbeat
	// before it was handled.
	inv.Kernel = "6.1.1"
	e.report(id, inv)
	writes := 0
	for {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Modified {
				t.Fatalf("watch event %s: %+v", ev.Type, ev.Object)
			}
			writes++
			got := ev.Object.(*fleetv1.Device)
			if got.Status.Inventory != nil && got.Status.Inventory.Kernel == "6.1.1" {
				if writes != 1 {
					t.Errorf("%d writes of the Device for %d heartbeats and one inventory change, want 1", writes, heartbeats)
				}
				return
			}
		case <-e.ctx.Done():
			t.Fatal(e.ctx.Err())
		}
	}
}

func maps(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func TestIdentityKVFollowsDevices(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-1")
	e.create(id, nil)
	e.start(time.Minute)
	sub := "sub-" + id
	e.waitIdentity("registration", sub, &events.IdentityEntry{Device: id})
	e.waitDevice(id, "the IdentityRegistered condition", func(d *fleetv1.Device) bool {
		c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionIdentityRegistered)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == fleetv1.ReasonRegistered
	})

	raw, err := e.identity.Get(e.ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fmt.Sprintf(`{"device":%q,"quarantined":false}`, id), string(raw.Value())); diff != "" {
		t.Errorf("value format (-want +got):\n%s", diff)
	}

	e.label(id, "blacklist", "true")
	e.waitIdentity("quarantine", sub, &events.IdentityEntry{Device: id, Quarantined: true})
	e.label(id, "blacklist", "")
	e.waitIdentity("quarantine lifted", sub, &events.IdentityEntry{Device: id})

	t.Run("a second Device claiming the same identity subject does not take it", func(t *testing.T) {
		other := e.id("rpi-9")
		d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: other, Namespace: e.ns}, Spec: fleetv1.DeviceSpec{IdentitySubject: sub}}
		if err := e.c.Create(e.ctx, d); err != nil {
			t.Fatal(err)
		}
		e.waitDevice(other, "the IdentityInUse condition", func(d *fleetv1.Device) bool {
			c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionIdentityRegistered)
			return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1.ReasonIdentityInUse
		})
		if got, _ := e.identityOf(sub); got.Device != id {
			t.Errorf("identity %s names %s, want the first Device %s", sub, got.Device, id)
		}
		if err := e.c.Delete(e.ctx, d); err != nil {
			t.Fatal(err)
		}
		e.waitGone(other)
		if got, ok := e.identityOf(sub); !ok || got.Device != id {
			t.Errorf("deleting the claimant removed or changed the owner's key: %+v %v", got, ok)
		}
	})

	t.Run("a value written with the shared encoding is another device's registration", func(t *testing.T) {
		// What the callout's harnesses and fleet dev write
		// (events.IdentityEntry.Encode) is read by the operator as the
		// registration of the device it names.
		taken := "sub-taken-" + id
		v, err := events.IdentityEntry{Device: "elsewhere"}.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.identity.Put(e.ctx, taken, v); err != nil {
			t.Fatal(err)
		}
		other := e.id("rpi-8")
		d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: other, Namespace: e.ns}, Spec: fleetv1.DeviceSpec{IdentitySubject: taken}}
		if err := e.c.Create(e.ctx, d); err != nil {
			t.Fatal(err)
		}
		e.waitDevice(other, "the IdentityInUse condition naming the other device", func(d *fleetv1.Device) bool {
			c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionIdentityRegistered)
			return c != nil && c.Reason == fleetv1.ReasonIdentityInUse && strings.Contains(c.Message, "registered to device elsewhere")
		})
		if err := e.c.Delete(e.ctx, d); err != nil {
			t.Fatal(err)
		}
		e.waitGone(other)
		if got, ok := e.identityOf(taken); !ok || got.Device != "elsewhere" {
			t.Errorf("the other device's key was removed or changed: %+v %v", got, ok)
		}
	})

	t.Run("changing the identity subject moves the key", func(t *testing.T) {
		d := e.get(id)
		d.Spec.IdentitySubject = "sub2-" + id
		if err := e.c.Update(e.ctx, d); err != nil {
			t.Fatal(err)
		}
		e.waitIdentity("the new key", "sub2-"+id, &events.IdentityEntry{Device: id})
		e.waitIdentity("the old key to go", sub, nil)
	})

	t.Run("deleting the Device deletes its key", func(t *testing.T) {
		if err := e.c.Delete(e.ctx, e.get(id)); err != nil {
			t.Fatal(err)
		}
		e.waitGone(id)
		if v, ok := e.identityOf("sub2-" + id); ok {
			t.Errorf("key left behind: %+v", v)
		}
	})
}

func (e *devEnv) waitGone(id string) {
	e.t.Helper()
	if err := testenv.PollErr(e.ctx, 60*time.Second, func() error {
		var d fleetv1.Device
		err := e.c.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: id}, &d)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		return fmt.Errorf("Device %s still there; finalizers %v", id, d.Finalizers)
	}); err != nil {
		e.t.Fatalf("waiting for Device %s to go: %v", id, err)
	}
}

func TestMergeReportedLabels(t *testing.T) {
	tests := []struct {
		name                string
		labels, owned, rep  map[string]string
		wantLabels, wantOwn map[string]string
	}{
		{"a first report adds its labels and owns them",
			nil, nil, map[string]string{"zone": "a"},
			map[string]string{"zone": "a"}, map[string]string{"zone": "a"}},
		{"a changed report value changes the label",
			map[string]string{"zone": "a"}, map[string]string{"zone": "a"}, map[string]string{"zone": "b"},
			map[string]string{"zone": "b"}, map[string]string{"zone": "b"}},
		{"a label no longer reported is removed",
			map[string]string{"zone": "a", "rack": "1"}, map[string]string{"zone": "a", "rack": "1"}, map[string]string{"zone": "a"},
			map[string]string{"zone": "a"}, map[string]string{"zone": "a"}},
		{"an admin label never reported is never touched",
			map[string]string{"role": "x"}, nil, nil,
			map[string]string{"role": "x"}, map[string]string{}},
		{"a report of a key an admin set does not override it",
			map[string]string{"role": "x"}, nil, map[string]string{"role": "y"},
			map[string]string{"role": "x"}, map[string]string{}},
		{"canary is placement data and may be reported",
			nil, nil, map[string]string{"canary": "true"},
			map[string]string{"canary": "true"}, map[string]string{"canary": "true"}},
		{"a report cannot add blacklist",
			nil, nil, map[string]string{"blacklist": "true"},
			map[string]string{}, map[string]string{}},
		{"a report cannot change an admin's blacklist",
			map[string]string{"blacklist": "true"}, nil, map[string]string{"blacklist": "false"},
			map[string]string{"blacklist": "true"}, map[string]string{}},
		{"a report cannot remove an admin's blacklist, even one wrongly recorded as reported",
			map[string]string{"blacklist": "true"}, map[string]string{"blacklist": "true"}, nil,
			map[string]string{"blacklist": "true"}, map[string]string{}},
		{"labels under fleet.nationtech.io/ are never reported",
			map[string]string{"fleet.nationtech.io/x": "1"}, nil, map[string]string{"fleet.nationtech.io/x": "2", "fleet.nationtech.io/y": "3"},
			map[string]string{"fleet.nationtech.io/x": "1"}, map[string]string{}},
		{"an invalid label is ignored",
			nil, nil, map[string]string{"bad key!": "v", "k": "bad value!"},
			map[string]string{}, map[string]string{}},
		{"an admin edit of a reported label is reverted to the report",
			map[string]string{"zone": "manual"}, map[string]string{"zone": "a"}, map[string]string{"zone": "a"},
			map[string]string{"zone": "a"}, map[string]string{"zone": "a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotLabels, gotOwned := operator.MergeReportedLabels(tc.labels, tc.owned, tc.rep)
			if diff := cmp.Diff(tc.wantLabels, gotLabels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantOwn, gotOwned); diff != "" {
				t.Errorf("owned (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReportsStoredBeforeTheOperatorStartsAreApplied(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-1")
	e.create(id, nil)
	e.report(id, events.DeviceInventory{OS: "debian-12", Arch: "arm64", Kernel: "6.1.0", AgentVersion: "1.2.3",
		Labels: map[string]string{"zone": "a"}})
	e.heartbeat(id)
	// Two operators at once: each reads every report with its own consumer.
	e.start(time.Minute)
	e.start(time.Minute)
	d := e.waitDevice(id, "Online with the inventory", func(d *fleetv1.Device) bool {
		return d.Status.Liveness == fleetv1.LivenessOnline && d.Status.Inventory != nil && d.Labels["zone"] == "a"
	})
	if d.Status.Inventory.AgentVersion != "1.2.3" {
		t.Errorf("inventory %+v", d.Status.Inventory)
	}
}

func TestADeviceIDIsServedOnceAcrossNamespaces(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-1")
	e.create(id, nil)
	e.start(time.Minute)
	e.waitIdentity("the first Device's identity", "sub-"+id, &events.IdentityEntry{Device: id})

	other := e.ns + "-b"
	if err := e.c.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}); err != nil {
		t.Fatal(err)
	}
	namesake := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: other},
		Spec: fleetv1.DeviceSpec{IdentitySubject: "subb-" + id}}
	if err := e.c.Create(e.ctx, namesake); err != nil {
		t.Fatal(err)
	}
	getNamesake := func() *fleetv1.Device {
		var d fleetv1.Device
		if err := e.c.Get(e.ctx, types.NamespacedName{Namespace: other, Name: id}, &d); err != nil {
			t.Fatal(err)
		}
		return &d
	}
	var c *metav1.Condition
	if err := testenv.Poll(e.ctx, 60*time.Second, func() bool {
		c = online(getNamesake())
		return c != nil && c.Reason == fleetv1.ReasonDuplicateDeviceID
	}); err != nil {
		t.Fatalf("the younger namesake has no DuplicateDeviceID condition (%v): %+v", err, c)
	}
	if got := getNamesake(); len(got.Finalizers) != 0 {
		t.Errorf("the unserved namesake has finalizers %v", got.Finalizers)
	}
	if v, ok := e.identityOf("subb-" + id); ok {
		t.Errorf("the unserved namesake registered its identity: %+v", v)
	}
	// Reports of the id go to the served Device only.
	e.heartbeat(id)
	e.waitDevice(id, "Online", func(d *fleetv1.Device) bool { return d.Status.Liveness == fleetv1.LivenessOnline })
	if l := getNamesake().Status.Liveness; l != fleetv1.LivenessUnknown {
		t.Errorf("the unserved namesake's liveness is %s, want Unknown", l)
	}

	// When the older Device goes, the namesake is the device.
	if err := e.c.Delete(e.ctx, e.get(id)); err != nil {
		t.Fatal(err)
	}
	e.waitGone(id)
	e.waitIdentity("the namesake's identity", "subb-"+id, &events.IdentityEntry{Device: id})
	if v, ok := e.identityOf("sub-" + id); ok {
		t.Errorf("the deleted Device's key is left: %+v", v)
	}
}

func TestNamesakesInSeveralNamespacesReconciledConcurrentlyServeEachIDOnce(t *testing.T) {
	e := newDevEnv(t)
	e.workers = 4
	namespaces := []string{e.ns, e.ns + "-b", e.ns + "-c"}
	for _, ns := range namespaces[1:] {
		if err := e.c.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range namespaces {
		t.Cleanup(func() { removeAll(t, e.c, ns) })
	}
	// Every Device exists before the operator starts: its workers take the
	// namesakes of each id at once. Each has its own identity subject.
	ids := []string{e.id("twin-1"), e.id("twin-2"), e.id("twin-3"), e.id("twin-4")}
	subject := func(d *fleetv1.Device) string { return "sub-" + d.Namespace + "-" + d.Name }
	for _, ns := range namespaces {
		for _, id := range ids {
			d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns}}
			d.Spec.IdentitySubject = subject(d)
			if err := e.c.Create(e.ctx, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	// byAge returns the Devices of id, the one that serves it first: the
	// oldest, creation times being equal the first namespace by name.
	byAge := func(id string) []fleetv1.Device {
		var out []fleetv1.Device
		for _, ns := range namespaces {
			var d fleetv1.Device
			err := e.c.Get(e.ctx, types.NamespacedName{Namespace: ns, Name: id}, &d)
			if client.IgnoreNotFound(err) != nil {
				t.Fatal(err)
			}
			if err == nil {
				out = append(out, d)
			}
		}
		slices.SortFunc(out, func(a, b fleetv1.Device) int {
			if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
				return c
			}
			return strings.Compare(a.Namespace, b.Namespace)
		})
		return out
	}
	// served checks that the first Device of each id is served (its key,
	// the IdentityRegistered condition) and the others are not (the
	// DuplicateDeviceID condition naming the served one, no finalizer, no
	// key).
	served := func(when string) {
		t.Helper()
		for _, id := range ids {
			devs := byAge(id)
			owner := devs[0]
			e.waitIdentity(when+": the identity of the served "+owner.Namespace+"/"+id, subject(&owner), &events.IdentityEntry{Device: id})
			for _, d := range devs[1:] {
				var got *fleetv1.Device
				err := testenv.Poll(e.ctx, 60*time.Second, func() bool {
					got = &fleetv1.Device{}
					if err := e.c.Get(e.ctx, types.NamespacedName{Namespace: d.Namespace, Name: id}, got); err != nil {
						t.Fatal(err)
					}
					c := online(got)
					return c != nil && c.Reason == fleetv1.ReasonDuplicateDeviceID && strings.Contains(c.Message, owner.Namespace+"/"+id)
				})
				if err != nil {
					t.Fatalf("%s: %v waiting for the DuplicateDeviceID condition of %s/%s naming %s: %+v", when, err, d.Namespace, id, owner.Namespace, got.Status)
				}
				if len(got.Finalizers) != 0 {
					t.Errorf("%s: the unserved %s/%s has finalizers %v", when, d.Namespace, id, got.Finalizers)
				}
				if v, ok := e.identityOf(subject(&d)); ok {
					t.Errorf("%s: the unserved %s/%s registered its identity: %+v", when, d.Namespace, id, v)
				}
			}
		}
	}
	e.start(time.Minute)
	served("at start")
	if n, ok := crGauge(t, "controller_runtime_max_concurrent_reconciles", "fleet-device"); !ok || n != 4 {
		t.Errorf("the Device controller runs %v workers (exported %v), want Options.DeviceWorkers 4", n, ok)
	}

	// The served Devices all go at once: each id passes to the next oldest
	// namesake while the others are reconciled.
	var gone []fleetv1.Device
	for _, id := range ids {
		owner := byAge(id)[0]
		if err := e.c.Delete(e.ctx, &owner); err != nil {
			t.Fatal(err)
		}
		gone = append(gone, owner)
	}
	for _, d := range gone {
		err := testenv.Poll(e.ctx, 60*time.Second, func() bool {
			var cur fleetv1.Device
			return apierrors.IsNotFound(e.c.Get(e.ctx, types.NamespacedName{Namespace: d.Namespace, Name: d.Name}, &cur))
		})
		if err != nil {
			t.Fatalf("%v waiting for %s/%s to go", err, d.Namespace, d.Name)
		}
		if v, ok := e.identityOf(subject(&d)); ok {
			t.Errorf("the deleted %s/%s left its key: %+v", d.Namespace, d.Name, v)
		}
	}
	served("after the oldest went")
}

// crGauge reads a gauge of controller-runtime's registry for one controller.
func crGauge(t *testing.T, name, controller string) (float64, bool) {
	t.Helper()
	fams, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					return m.GetGauge().GetValue(), true
				}
			}
		}
	}
	return 0, false
}

func TestOneTelemetryConsumerServesEveryDevice(t *testing.T) {
	e := newDevEnv(t)
	const devices = 20
	ids := make([]string, devices)
	for i := range ids {
		ids[i] = e.id(fmt.Sprintf("rpi-%d", i))
		e.create(ids[i], nil)
	}
	e.start(time.Minute)
	for _, id := range ids {
		e.heartbeat(id)
	}
	for _, id := range ids {
		e.waitDevice(id, "Online", func(d *fleetv1.Device) bool { return d.Status.Liveness == fleetv1.LivenessOnline })
	}
	for _, stream := range []string{events.StreamLiveness, events.StreamTelemetry} {
		s, err := e.store.JetStream().Stream(e.ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Consumers != 1 {
			t.Errorf("%d consumers on %s for %d devices, want 1", info.State.Consumers, stream, devices)
		}
	}
}

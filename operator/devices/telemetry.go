package devices

import (
	"context"
	"fmt"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	projrunner "github.com/nationtech/harmony-fleet/projections/runner"
)

// telemetry is the operator's in-memory view of device telemetry: the last
// heartbeat time and the last inventory of each device, fed by one ordered
// consumer each on FLEET_LIVENESS and FLEET_TELEMETRY, and the liveness the Device controller last
// decided for each device. Liveness lives here and in the stream, not in
// etcd: the controller writes the Device status on transitions only.
type telemetry struct {
	mu sync.Mutex
	// devices, by device id, is guarded by mu.
	devices map[string]*deviceTelemetry
	// metrics counts the devices by decided liveness (nil: not counted).
	metrics *Metrics

	// followed is set when a follow feeds the view (followTelemetry will
	// run): reconciles then wait for loaded rather than read the streams
	// per Device. loaded closes once every source of the follow read the
	// last report of every subject it holds; caught counts them.
	followed bool
	loaded   chan struct{}
	caught   map[int]bool
	// waitUntil bounds the wait for loaded (set by the first waiter,
	// loadWait after it): past it, reconciles read each Device's reports
	// with direct gets, as without a follow. Guarded by mu.
	waitUntil time.Time
	loadWait  time.Duration
	// reread are the devices forgotten (their Device deleted) since the
	// view was loaded: their next Device reads the stream again. Guarded
	// by mu.
	reread map[string]bool
}

type deviceTelemetry struct {
	heartbeat time.Time // stream time of the last heartbeat; zero: none seen
	invSeq    uint64    // stream sequence of inventory; 0: none seen
	// inventory is the last inventory, bounded as a Device may carry it
	// (boundReport), with what the bounds dropped.
	inventory boundedReport
	// decided is the liveness the controller last decided; a heartbeat wakes
	// the controller only when it was not Online.
	decided fleetv1.Liveness
	// contSeq is the stream sequence of the last containers report; 0:
	// none seen.
	contSeq uint64
	// containers is the last containers report, bounded as a Device
	// carries it (boundContainers).
	containers boundedContainers
	// workloadsWritten is when the controller last wrote the Device's
	// status.workloads; zero: not since this operator started.
	workloadsWritten time.Time
	// noInventory and noContainers: the stream held no report of that
	// kind when the controller asked it (loadLast found nothing), so it
	// does not ask again; a live report of that kind clears them.
	noInventory, noContainers bool
}

func newTelemetry(m *Metrics) *telemetry {
	return &telemetry{devices: map[string]*deviceTelemetry{}, metrics: m, loaded: make(chan struct{}), caught: map[int]bool{},
		loadWait: telemetryLoadWait}
}

// telemetryLoadWait bounds how long reconciles wait for the follow's first
// read of every last report (the operator's start): past it, a follow
// that cannot read (a stream missing) costs direct gets, not a stalled
// controller.
const telemetryLoadWait = time.Minute

// follow marks that a follow (followTelemetry) feeds the view.
func (t *telemetry) follow() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.followed = true
}

// caughtUp records that the follow's source read the last report of every
// subject its stream held when it started; once every one of sources did,
// the view is loaded.
func (t *telemetry) caughtUp(source, sources int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.caught[source] || len(t.caught) >= sources {
		return
	}
	t.caught[source] = true
	if len(t.caught) == sources {
		close(t.loaded)
	}
}

// awaitLoaded waits until the follow loaded the view and reports whether
// it holds every report the streams hold of device: false without a
// follow, after telemetryLoadWait, when ctx ends first, or for a device
// forgotten since (its reports are read from the stream once more).
func (t *telemetry) awaitLoaded(ctx context.Context, device string) bool {
	t.mu.Lock()
	if !t.followed {
		t.mu.Unlock()
		return false
	}
	if t.waitUntil.IsZero() {
		t.waitUntil = time.Now().Add(t.loadWait)
	}
	wait := time.Until(t.waitUntil)
	t.mu.Unlock()
	select {
	case <-t.loaded:
	default:
		if wait <= 0 {
			return false
		}
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-t.loaded:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return !t.reread[device]
}

// reloaded records that a forgotten device's reports were read from the
// stream again.
func (t *telemetry) reloaded(device string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.reread, device)
}

func (t *telemetry) entry(device string) *deviceTelemetry {
	d := t.devices[device]
	if d == nil {
		d = &deviceTelemetry{}
		t.devices[device] = d
	}
	return d
}

// heartbeat records a heartbeat stored at at and reports whether the
// controller must look at the device: when it has not decided it Online.
func (t *telemetry) heartbeat(device string, at time.Time) (wake bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.entry(device)
	if at.After(d.heartbeat) {
		d.heartbeat = at
	}
	return d.decided != fleetv1.LivenessOnline
}

// inventory records an inventory stored at stream sequence seq (older ones
// are ignored), bounded as a Device may carry it (boundReport: what a
// bound cut is counted once here), and reports whether it is new.
func (t *telemetry) inventory(device string, seq uint64, inv events.DeviceInventory) bool {
	b := boundReport(inv) // outside the lock every heartbeat takes
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.entry(device)
	if seq <= d.invSeq {
		return false
	}
	d.invSeq, d.inventory, d.noInventory = seq, b, false
	for _, tr := range d.inventory.trims {
		t.metrics.ReportTrimmed(tr.field)
	}
	return true
}

// containers records a containers report stored at stream sequence seq
// (older ones are ignored), bounded as a Device carries it, and returns
// the restarts each Deployment's containers gained since the device's
// previous report (none for the first one seen: the baseline) and whether
// the report is new and says something else than the one before it (the
// same report again changes no Device).
func (t *telemetry) containers(device string, seq uint64, c events.DeviceContainers) (deltas []restartDelta, changed bool) {
	b := boundContainers(c) // outside the lock every heartbeat takes
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.entry(device)
	if seq <= d.contSeq {
		return nil, false
	}
	first := d.contSeq == 0
	deltas = restartDeltas(d.containers, b, first)
	changed = first || !b.same(d.containers)
	d.contSeq, d.containers, d.noContainers = seq, b, false
	return deltas, changed
}

// lacks records that the stream holds no report of kind (inventory or
// containers) for the device: loadReports does not ask it again until a
// live report of that kind arrives.
func (t *telemetry) lacks(device string, kind events.ReportKind) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.entry(device)
	switch kind {
	case events.ReportInventory:
		d.noInventory = d.invSeq == 0
	case events.ReportContainers:
		d.noContainers = d.contSeq == 0
	}
}

// wroteWorkloads records that the controller wrote the Device's
// status.workloads at at.
func (t *telemetry) wroteWorkloads(device string, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.entry(device).workloadsWritten = at
}

// snapshot returns a copy of what is known of a device (the zero value:
// nothing seen yet).
func (t *telemetry) snapshot(device string) deviceTelemetry {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d := t.devices[device]; d != nil {
		return *d
	}
	return deviceTelemetry{}
}

// connState is what the servers say of a device's connections (ADR
// 0032): tracked is false without a Connections source (heartbeats only,
// ADR 0024); since is when its first connection came up (up) or its last
// one went (not up); zero: none seen.
type connState struct {
	tracked, up bool
	since       time.Time
	// recorded is the Device's status.lastHeartbeat when tracked: what
	// this operator knew at its last transition, so a restarted operator
	// that has seen neither a connection nor a heartbeat of a device
	// since keeps Stale a device that was, and turns Stale one that was
	// Online but disconnected meanwhile (never Unknown again).
	recorded time.Time
}

// decide computes the liveness of a device at now from the last heartbeat
// known and its connections and records it, under one lock with
// heartbeat(), so a heartbeat that arrives while the controller decides
// Stale always wakes it again. A device with a connection up is Online;
// else Online until staleAfter after the later of its last heartbeat and
// its last connection's end. The time returned is when it was last seen
// (the connection's start while one is up).
func (t *telemetry) decide(device string, now time.Time, staleAfter time.Duration, c connState) (fleetv1.Liveness, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d := t.entry(device)
	seen := d.heartbeat
	var l fleetv1.Liveness
	switch {
	case c.up:
		l, seen = fleetv1.LivenessOnline, c.since
	default:
		for _, at := range []time.Time{c.since, c.recorded} {
			if at.After(seen) {
				seen = at
			}
		}
		l = livenessAt(seen, now, staleAfter)
	}
	t.metrics.LivenessChanged(d.decided, l)
	d.decided = l
	return l, seen
}

// forget drops what is known of a device whose Device is gone; a later
// Device of that id reads its reports from the stream again.
func (t *telemetry) forget(device string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if d := t.devices[device]; d != nil {
		t.metrics.LivenessChanged(d.decided, "")
	}
	delete(t.devices, device)
	if t.followed {
		if t.reread == nil {
			t.reread = map[string]bool{}
		}
		t.reread[device] = true
	}
}

// livenessAt is Unknown before any heartbeat, Online while the last one is
// younger than staleAfter, Stale after.
func livenessAt(heartbeat, now time.Time, staleAfter time.Duration) fleetv1.Liveness {
	switch {
	case heartbeat.IsZero():
		return fleetv1.LivenessUnknown
	case now.Sub(heartbeat) < staleAfter:
		return fleetv1.LivenessOnline
	default:
		return fleetv1.LivenessStale
	}
}

// The subjects the Device controller follows: every device's heartbeats
// (FLEET_LIVENESS, ADR 0024) in one consumer, and every device's
// inventories and container reports (FLEET_TELEMETRY) in another.
var (
	heartbeatFilters = []string{"fleet.report.*." + string(events.ReportHeartbeat)}
	telemetryFilters = []string{"fleet.report.*." + string(events.ReportInventory), "fleet.report.*." + string(events.ReportContainers)}
)

// followTelemetry feeds the telemetry view from the event store's follows
// of FLEET_LIVENESS and FLEET_TELEMETRY (one ordered consumer each for all
// devices, never one per device, read through projections/runner) and wakes the Device controller
// through wake, one generic event per Device named by a report that may
// change its status. It starts from the last report per subject, which is
// the whole current state, so a restart loses nothing: once both reads
// caught up with it the view is loaded, and reconciles read no report
// per Device (awaitLoaded). A failed read is
// read again from after the last report observed, after a wait that
// doubles from one second to 30. A record that does not decode (the
// device's own garbage, another device's keys on its subject) is skipped
// and counted; the follow goes on. It returns when ctx ends.
func (r *Reconciler) followTelemetry(ctx context.Context, wake chan<- event.GenericEvent) error {
	ctx, cancel := context.WithCancel(ctx)
	in := make(chan projrunner.Msg, 1024)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	reads := &projrunner.Runner{Name: "telemetry consumer", Reader: r.Store, Log: r.Log,
		RetryMin: telemetryRetryMin, RetryMax: telemetryRetryMax,
		Sources: []projrunner.Source{
			{Filters: heartbeatFilters, From: events.FromLastPerSubject()},
			{Filters: telemetryFilters, From: events.FromLastPerSubject()},
		}}
	wg.Go(func() { reads.Run(ctx, in) })
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-in:
			switch {
			case m.Skip != nil:
				r.Skips.Skip(ctx, r.Log, m.Skip)
			case m.Caught:
				r.telemetry.caughtUp(m.Source, len(reads.Sources))
			case m.Err != nil:
			default:
				if err := r.observe(ctx, m.Record, wake); err != nil {
					// One report must not stop the others.
					r.Log.WarnContext(ctx, "telemetry report ignored", "subject", m.Record.Subject, "error", err)
				}
			}
		}
	}
}

// telemetryRetryMin and telemetryRetryMax bound the wait before the
// telemetry follow is read again after a failed read.
const (
	telemetryRetryMin = time.Second
	telemetryRetryMax = 30 * time.Second
)

// observe records one telemetry report and wakes the Devices it concerns
// when it may change their status; a containers report also counts the
// restarts its containers gained (countRestarts). An inventory or
// containers report whose data does not decode is skipped and counted.
// The device is the one in the subject (events.DecodeStored checked that
// the keys name it).
func (r *Reconciler) observe(ctx context.Context, rec events.Record, wake chan<- event.GenericEvent) error {
	device := rec.Event.Keys.Device
	switch rec.Event.Type {
	case events.TypeDeviceHeartbeat:
		if !r.telemetry.heartbeat(device, rec.Stored) {
			return nil
		}
	case events.TypeDeviceInventory:
		inv, err := events.Decode[events.DeviceInventory](rec.Event)
		if err != nil {
			r.Skips.Skip(ctx, r.Log, events.InvalidData(rec, err))
			return nil
		}
		if !r.telemetry.inventory(device, rec.Sequence, inv) {
			return nil
		}
	case events.TypeDeviceContainers:
		c, err := events.Decode[events.DeviceContainers](rec.Event)
		if err != nil {
			r.Skips.Skip(ctx, r.Log, events.InvalidData(rec, err))
			return nil
		}
		deltas, changed := r.telemetry.containers(device, rec.Sequence, c)
		if err := r.countRestarts(ctx, device, deltas); err != nil {
			r.Log.WarnContext(ctx, "container restarts not counted", "device", device, "error", err)
		}
		if !changed {
			return nil
		}
	default:
		return nil
	}
	return r.wakeDevice(ctx, device, wake)
}

// wakeDevice enqueues every Device named device (normally one; namesakes in
// other namespaces are reconciled too so they can say why they are not
// served), found through the device-id field index of the cache.
func (r *Reconciler) wakeDevice(ctx context.Context, device string, wake chan<- event.GenericEvent) error {
	var list fleetv1.DeviceList
	if err := r.Client.List(ctx, &list, client.MatchingFields{IndexDeviceID: device}); err != nil {
		return fmt.Errorf("find Device %s: %w", device, err)
	}
	for i := range list.Items {
		select {
		case wake <- event.GenericEvent{Object: &list.Items[i]}:
		case <-ctx.Done():
			return nil
		}
	}
	return nil
}

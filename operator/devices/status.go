// The Device controller's status job: heartbeats and inventory onto Device
// status (liveness, conditions) and reported labels.

package devices

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/kstatus"
)

// syncReports brings status and labels to what the device last reported:
// first the status (claiming new report-owned label keys), then the labels,
// then the status again to release keys no longer reported.
func (r *Reconciler) syncReports(ctx context.Context, d *fleetv1.Device, registered metav1.Condition) (ctrl.Result, error) {
	if err := r.loadReports(ctx, d.Name); err != nil {
		return ctrl.Result{}, err
	}
	seen := r.telemetry.snapshot(d.Name)
	inv, invSeq := seen.inventory, seen.invSeq
	now := r.Now()
	conn := r.connState(d)
	liveness, hb := r.telemetry.decide(d.Name, now, r.StaleAfter, conn)
	// While Online, look again when the last heartbeat would turn stale, on
	// every path (a write's own watch event may be the no-op of a racing
	// writer); a little jitter spreads devices that came online together.
	// A device with a connection up is looked at again when it goes (the
	// Connections source wakes it).
	var next ctrl.Result
	if liveness == fleetv1.LivenessOnline && !conn.up {
		in := hb.Add(r.StaleAfter).Sub(now) + rand.N(r.StaleAfter/50+time.Millisecond)
		next.RequeueAfter = max(in, time.Millisecond)
	}

	// inv is bounded already (boundReport): at most MaxReportedLabels
	// reportable labels, escaped and cut strings.
	owned, pinned, pins := d.Status.ReportedLabels, d.Status.PinnedLabels, devicePins(d)
	newLabels, newOwned := d.Labels, owned
	inventory := d.Status.Inventory
	if invSeq > 0 {
		newLabels, newOwned = MergeReportedLabels(d.Labels, ClaimPinnedKeys(owned, pins, pinned), inv.Labels)
		inventory = &fleetv1.DeviceInventory{OS: inv.OS, Arch: inv.Arch, Kernel: inv.Kernel, AgentVersion: inv.AgentVersion, TimeZone: inv.TimeZone}
	}
	newLabels, newPinned := PinLabels(newLabels, newOwned, pins, pinned)
	labelsChange := !maps.Equal(newLabels, d.Labels)
	statusOwned, statusPinned := newOwned, newPinned
	if labelsChange {
		statusOwned, statusPinned = claimedLabels(owned, newOwned), claimedPins(pinned, newPinned)
	}

	want := fleetv1.DeviceStatus{
		Liveness:       liveness,
		LastHeartbeat:  d.Status.LastHeartbeat,
		Inventory:      inventory,
		ReportedLabels: statusOwned,
		PinnedLabels:   statusPinned,
		Conditions:     []metav1.Condition{r.onlineCondition(d, liveness, hb, conn), registered},
	}
	if c, ok := labelsOverridden(d, pins, newOwned); ok {
		want.Conditions = append(want.Conditions, c)
	}
	if invSeq > 0 && len(inv.trims) > 0 {
		want.Conditions = append(want.Conditions, trimmedCondition(d, inv.trims))
	}
	if liveness != d.Status.Liveness {
		want.LastHeartbeat = heartbeatTime(hb)
	}
	// The workloads of the last containers report: written when
	// WorkloadsInterval passed since the last write of them, or along
	// with a write for another reason; else looked at again when it
	// passes.
	want.Workloads, want.DegradedWorkloads, want.WorkloadsTruncated = d.Status.Workloads, d.Status.DegradedWorkloads, d.Status.WorkloadsTruncated
	newWorkloads := seen.contSeq > 0 && !sameWorkloads(seen.containers, d.Status)
	if newWorkloads {
		due, wait := workloadsDue(seen.workloadsWritten, now, WorkloadsInterval)
		if due || !statusEqual(want, d.Status) {
			c := seen.containers
			want.Workloads, want.DegradedWorkloads, want.WorkloadsTruncated = c.workloads, c.degraded, c.truncated
		} else {
			newWorkloads = false
			if next.RequeueAfter == 0 || wait < next.RequeueAfter {
				next.RequeueAfter = wait
			}
		}
	}
	if !statusEqual(want, d.Status) {
		// lastHeartbeat stays the one of the last liveness transition:
		// it is what the Liveness-Since column shows.
		if err := r.WriteStatus(ctx, d, want); err != nil {
			return next, err
		}
		if newWorkloads {
			r.telemetry.wroteWorkloads(d.Name, now)
		}
		return next, nil
	}
	if labelsChange {
		orig := d.DeepCopy()
		d.Labels = newLabels
		if err := r.Client.Patch(ctx, d, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("mirror reported labels of Device %s/%s: %w", d.Namespace, d.Name, err)
		}
		r.Log.InfoContext(ctx, "reported labels mirrored", "device", d.Name, "namespace", d.Namespace)
	}
	return next, nil
}

// loadReports makes sure the telemetry view holds the device's last
// heartbeat, inventory and containers report. Normally the follow holds
// them: the reconcile waits until it read every last report (the start),
// and reads nothing per Device. Without a loaded follow (none, or it could
// not read within telemetryLoadWait) and for a device forgotten since,
// each one the view lacks is read from the stream with a direct get; an
// inventory or containers report the stream does not hold is asked for
// once: the telemetry remembers it lacks one (telemetry.lacks) until a
// live report comes.
func (r *Reconciler) loadReports(ctx context.Context, device string) error {
	if r.telemetry.awaitLoaded(ctx, device) {
		return nil
	}
	if err := r.readReports(ctx, device); err != nil {
		return err
	}
	r.telemetry.reloaded(device)
	return nil
}

// readReports reads from the stream each of the device's last reports the
// telemetry view lacks (one direct get each).
func (r *Reconciler) readReports(ctx context.Context, device string) error {
	seen := r.telemetry.snapshot(device)
	if seen.heartbeat.IsZero() {
		rec, err := r.last(ctx, device, events.ReportHeartbeat)
		if err != nil && !errors.Is(err, errNoReport) {
			return err
		}
		if rec != nil {
			r.telemetry.heartbeat(device, rec.Stored)
		}
	}
	if seen.invSeq == 0 && !seen.noInventory {
		if err := r.loadLast(ctx, device, events.ReportInventory, func(rec events.Record) error {
			inv, err := events.Decode[events.DeviceInventory](rec.Event)
			if err == nil {
				r.telemetry.inventory(device, rec.Sequence, inv)
			}
			return err
		}); err != nil {
			return err
		}
	}
	if seen.contSeq == 0 && !seen.noContainers {
		return r.loadLast(ctx, device, events.ReportContainers, func(rec events.Record) error {
			c, err := events.Decode[events.DeviceContainers](rec.Event)
			if err == nil {
				// The first report seen of the device: its baseline,
				// no restarts to count.
				r.telemetry.containers(device, rec.Sequence, c)
			}
			return err
		})
	}
	return nil
}

// loadLast passes the device's last report of kind, if any, to use; a
// report whose data use cannot decode is skipped and counted (a bad report
// must not stall the Device: what is known is kept). When the stream holds
// no report of kind, the telemetry remembers it (telemetry.lacks).
func (r *Reconciler) loadLast(ctx context.Context, device string, kind events.ReportKind, use func(events.Record) error) error {
	rec, err := r.last(ctx, device, kind)
	if errors.Is(err, errNoReport) {
		r.telemetry.lacks(device, kind)
		return nil
	}
	if err != nil || rec == nil {
		return err
	}
	if err := use(*rec); err != nil {
		r.Skips.Skip(ctx, r.Log, events.InvalidData(*rec, err))
	}
	return nil
}

// errNoReport is last's answer when the stream holds no report of the
// kind asked for (events.ErrNotFound).
var errNoReport = errors.New("no report of this kind in the stream")

// last reads the device's last report of kind: errNoReport when the stream
// holds none; nil and no error when the last one does not decode (skipped
// and counted).
func (r *Reconciler) last(ctx context.Context, device string, kind events.ReportKind) (*events.Record, error) {
	subject, err := events.ReportSubject(device, kind)
	if err != nil {
		return nil, err
	}
	rec, err := r.Store.Last(ctx, subject)
	if errors.Is(err, events.ErrNotFound) {
		return nil, errNoReport
	}
	if re, ok := events.AsRecordError(err); ok {
		// The device's last report does not decode: skipped and counted,
		// as if there were none (the next report replaces it).
		r.Skips.Skip(ctx, r.Log, re)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read last %s of %s: %w", kind, device, err)
	}
	return &rec, nil
}

func heartbeatTime(hb time.Time) *metav1.Time {
	if hb.IsZero() {
		return nil
	}
	t := metav1.NewTime(hb.UTC().Truncate(time.Second))
	return &t
}

func (r *Reconciler) onlineCondition(d *fleetv1.Device, l fleetv1.Liveness, hb time.Time, c connState) metav1.Condition {
	switch {
	case c.up || c.tracked && l == fleetv1.LivenessOnline:
		// One condition while Online, connected or not: a connection closes
		// and comes back every token lifetime (ADR 0006), and a condition
		// that told the two apart would be a Device write per device and
		// lifetime (at 100,000 devices and 10 minutes, 333 a second), not
		// a transition.
		return deviceCondition(d, fleetv1.ConditionOnline, metav1.ConditionTrue, fleetv1.ReasonConnected,
			fmt.Sprintf("connected to a NATS server, or its connection went less than %s ago", r.StaleAfter))
	case c.tracked && l == fleetv1.LivenessStale:
		return deviceCondition(d, fleetv1.ConditionOnline, metav1.ConditionFalse, fleetv1.ReasonDisconnected,
			fmt.Sprintf("no connection and no heartbeat for %s since %s", r.StaleAfter, hb.UTC().Truncate(time.Second).Format(time.RFC3339)))
	}
	switch l {
	case fleetv1.LivenessOnline:
		return deviceCondition(d, fleetv1.ConditionOnline, metav1.ConditionTrue, fleetv1.ReasonHeartbeating, fmt.Sprintf("heartbeats arrive within %s", r.StaleAfter))
	case fleetv1.LivenessStale:
		return deviceCondition(d, fleetv1.ConditionOnline, metav1.ConditionFalse, fleetv1.ReasonHeartbeatMissed,
			fmt.Sprintf("no heartbeat for %s since %s", r.StaleAfter, hb.UTC().Truncate(time.Second).Format(time.RFC3339)))
	default:
		return deviceCondition(d, fleetv1.ConditionOnline, metav1.ConditionUnknown, fleetv1.ReasonNoHeartbeat, "no heartbeat received yet")
	}
}

// statusEqual compares the fields the controller owns: a is the wanted
// status, b the current one.
func statusEqual(a, b fleetv1.DeviceStatus) bool {
	if a.Liveness != b.Liveness || !maps.Equal(a.ReportedLabels, b.ReportedLabels) || !slices.Equal(a.PinnedLabels, b.PinnedLabels) {
		return false
	}
	// LabelsOverridden is ours and is absent while the Device has no pin.
	if meta.FindStatusCondition(a.Conditions, fleetv1.ConditionLabelsOverridden) == nil &&
		meta.FindStatusCondition(b.Conditions, fleetv1.ConditionLabelsOverridden) != nil {
		return false
	}
	if (a.LastHeartbeat == nil) != (b.LastHeartbeat == nil) || (a.LastHeartbeat != nil && !a.LastHeartbeat.Equal(b.LastHeartbeat)) {
		return false
	}
	if (a.Inventory == nil) != (b.Inventory == nil) || (a.Inventory != nil && *a.Inventory != *b.Inventory) {
		return false
	}
	if !workloadsEqual(a, b) {
		return false
	}
	// ReportTrimmed is ours and goes once a report is within bounds: a
	// status without it differs from one with it.
	if meta.FindStatusCondition(a.Conditions, fleetv1.ConditionReportTrimmed) == nil &&
		meta.FindStatusCondition(b.Conditions, fleetv1.ConditionReportTrimmed) != nil {
		return false
	}
	// Conditions of other owners in b, if any, are not ours to compare.
	for _, x := range a.Conditions {
		y := meta.FindStatusCondition(b.Conditions, x.Type)
		if y == nil || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}

// WriteStatus writes want as the Device's status, decided from d.
// applyStatus writes want when it differs from the current status, only
// over the version of d it was decided from: status.reportedLabels is
// decided from d's metadata.labels, and a reconcile that read a stale cached
// Device (the telemetry consumer calls reconciles that no watch event of the
// Device brought) would otherwise release labels a newer write claimed,
// leaving a report-set label looking like an admin's for good. A Conflict is
// retried by Reconcile with the fresh object.
func (r *Reconciler) WriteStatus(ctx context.Context, d *fleetv1.Device, want fleetv1.DeviceStatus) error {
	if statusEqual(want, d.Status) {
		return nil
	}
	want.Conditions = kstatus.OwnConditions(d.Status.Conditions, want.Conditions...)
	if err := kstatus.ApplyAt(ctx, r.Client, "Device", d.Namespace, d.Name, d.ResourceVersion, &want, FieldOwnerDevices); err != nil {
		return err
	}
	r.Log.InfoContext(ctx, "device status", "device", d.Name, "namespace", d.Namespace, "liveness", want.Liveness,
		"reason", want.Conditions[0].Reason)
	return nil
}

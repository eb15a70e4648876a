package operator

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// DeviceStore is what the Device controller needs of the event store
// (*events.Store): direct gets of the last report on a subject, the follow
// of every device's telemetry, and the JetStream handle for the
// fleet-identity bucket.
type DeviceStore interface {
	Last(ctx context.Context, subject string) (events.Record, error)
	FollowSubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error]
	JetStream() jetstream.JetStream
}

// DefaultStaleAfter is how long a device stays Online after its last
// heartbeat when Options.StaleAfter is zero.
const DefaultStaleAfter = 90 * time.Second

// FieldOwnerDevices is the server-side-apply field manager of the Device
// status fields the Device controller owns (all of them).
const FieldOwnerDevices = "fleet-operator-devices"

// FinalizerDeviceIdentity lets the operator delete the Device's
// fleet-identity key before the Device disappears.
const FinalizerDeviceIdentity = "fleet.nationtech.io/identity"

// AnnotationRegisteredIdentity records the identity subject whose
// fleet-identity key the operator wrote for the Device, so a changed
// spec.identitySubject deletes the old key.
const AnnotationRegisteredIdentity = "fleet.nationtech.io/registered-identity"

// IndexDeviceID is the cache field index of Devices by device id
// (metadata.name) across namespaces: a report names a device id only.
const IndexDeviceID = "fleet.device.id"

// ConditionIdentityRegistered says whether the Device's identity subject is
// registered to it in the fleet-identity KV.
const ConditionIdentityRegistered = "IdentityRegistered"

// Reasons of the Online and IdentityRegistered conditions of a Device.
const (
	// ReasonRegistered: the fleet-identity key of spec.identitySubject names
	// this device.
	ReasonRegistered = "Registered"
	// ReasonIdentityInUse: spec.identitySubject is registered to another
	// device; this Device's identity is not registered until it is fixed.
	ReasonIdentityInUse = "IdentityInUse"
	// ReasonHeartbeating: heartbeats arrive within StaleAfter.
	ReasonHeartbeating = "Heartbeating"
	// ReasonHeartbeatMissed: no heartbeat for StaleAfter.
	ReasonHeartbeatMissed = "HeartbeatMissed"
	// ReasonNoHeartbeat: no heartbeat was ever received.
	ReasonNoHeartbeat = "NoHeartbeat"
	// ReasonDuplicateDeviceID: an older Device in another namespace has the
	// same name (device id); this one is not served until renamed.
	ReasonDuplicateDeviceID = "DuplicateDeviceID"
)

// identityConflictRetry is how soon a Device whose identity subject is
// registered to another device looks again.
const identityConflictRetry = time.Minute

// DeviceReconciler projects device reports onto Device status and labels
// and keeps the fleet-identity KV in sync with Devices. Status is written on
// transitions only (liveness, inventory, labels), never per heartbeat.
type DeviceReconciler struct {
	// Client should read from the manager's cache (it uses IndexDeviceID).
	Client client.Client
	// Store gives the reports and the fleet-identity bucket.
	Store DeviceStore
	// StaleAfter: a device is Stale once its last heartbeat is this old.
	// Default DefaultStaleAfter.
	StaleAfter time.Duration
	// Log receives the controller's records; nil: discard.
	Log *slog.Logger
	// Skips counts the device reports the controller skips because they do
	// not decode. Nil-safe.
	Skips *events.SkipCounter

	telemetry *telemetry

	kvMu sync.Mutex
	kv   jetstream.KeyValue // the fleet-identity bucket, resolved once; guarded by kvMu
}

// SetupWithManager registers the field index, the telemetry consumer (one
// per operator, for all devices) and the controller.
func (r *DeviceReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.StaleAfter < 0 {
		return fmt.Errorf("device controller: stale-after is %s: use a positive duration (default %s)", r.StaleAfter, DefaultStaleAfter)
	}
	if r.StaleAfter == 0 {
		r.StaleAfter = DefaultStaleAfter
	}
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	r.telemetry = newTelemetry()
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &fleetv1.Device{}, IndexDeviceID,
		func(o client.Object) []string { return []string{o.GetName()} })
	if err != nil {
		return fmt.Errorf("device controller: index %s: %w", IndexDeviceID, err)
	}
	wake := make(chan event.GenericEvent)
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil // ctx ended first
		}
		return r.followTelemetry(ctx, wake)
	}))
	if err != nil {
		return fmt.Errorf("device controller: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1.Device{}).
		Named("fleet-device").
		Watches(&fleetv1.Device{}, handler.EnqueueRequestsFromMapFunc(r.namesakes)).
		WatchesRawSource(source.Channel(wake, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// namesakes maps a Device event to the other Devices with the same name, so
// a younger namesake is served as soon as the older one goes.
func (r *DeviceReconciler) namesakes(ctx context.Context, o client.Object) []reconcile.Request {
	var list fleetv1.DeviceList
	if err := r.Client.List(ctx, &list, client.MatchingFields{IndexDeviceID: o.GetName()}); err != nil {
		r.Log.WarnContext(ctx, "list namesakes", "device", o.GetName(), "error", err)
		return nil
	}
	var out []reconcile.Request
	for _, d := range list.Items {
		if d.Namespace != o.GetNamespace() {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: d.Namespace, Name: d.Name}})
		}
	}
	return out
}

// reconcile does one action per call: serve only the oldest Device of a
// name, add the finalizer, register the identity subject, write the
// fleet-identity value, write status, mirror labels; on deletion, delete the
// identity key and drop the finalizer. While the device is Online it asks to
// be called again when its last heartbeat would turn stale.
func (r *DeviceReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var d fleetv1.Device
	if err := r.Client.Get(ctx, req.NamespacedName, &d); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	older, err := r.olderNamesake(ctx, &d)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !d.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.finalize(ctx, &d, older == nil)
	}
	if older != nil {
		return ctrl.Result{}, r.applyStatus(ctx, &d, duplicateStatus(&d, older))
	}
	if !controllerutil.ContainsFinalizer(&d, FinalizerDeviceIdentity) {
		controllerutil.AddFinalizer(&d, FinalizerDeviceIdentity)
		return ctrl.Result{}, r.Client.Update(ctx, &d)
	}
	acted, idc, retry, err := r.syncIdentity(ctx, &d)
	if err != nil || acted {
		return ctrl.Result{RequeueAfter: retry}, err
	}
	res, err := r.syncReports(ctx, &d, idc)
	if retry > 0 && (res.RequeueAfter == 0 || retry < res.RequeueAfter) {
		res.RequeueAfter = retry
	}
	return res, err
}

// Reconcile wraps reconcile: a write that lost an optimistic-concurrency race
// (another writer changed the Device first) is retried soon with the fresh
// object, without an error log.
func (r *DeviceReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcile(ctx, req)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctrl.Result{}, nil // stopping
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: 50*time.Millisecond + rand.N(100*time.Millisecond)}, nil
	}
	return res, err
}

// olderNamesake returns the Device that owns d's device id when it is not d:
// the oldest Device of that name across namespaces (ties broken by
// namespace). Device ids are cluster-unique this way: reports and
// fleet-identity values name the device only.
func (r *DeviceReconciler) olderNamesake(ctx context.Context, d *fleetv1.Device) (*fleetv1.Device, error) {
	var list fleetv1.DeviceList
	if err := r.Client.List(ctx, &list, client.MatchingFields{IndexDeviceID: d.Name}); err != nil {
		return nil, fmt.Errorf("list Devices named %s: %w", d.Name, err)
	}
	var owner *fleetv1.Device
	for i := range list.Items {
		c := &list.Items[i]
		if owner == nil || older(c, owner) {
			owner = c
		}
	}
	if owner == nil || owner.Namespace == d.Namespace {
		return nil, nil
	}
	if older(d, owner) { // the cache has not seen d yet
		return nil, nil
	}
	return owner, nil
}

func older(a, b *fleetv1.Device) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	return a.Namespace < b.Namespace
}

func duplicateStatus(d, owner *fleetv1.Device) fleetv1.DeviceStatus {
	return fleetv1.DeviceStatus{
		Liveness: fleetv1.LivenessUnknown,
		Conditions: []metav1.Condition{condition(d, fleetv1.ConditionOnline, metav1.ConditionFalse, ReasonDuplicateDeviceID,
			fmt.Sprintf("device id %s is already the Device %s/%s (created earlier); device ids are unique across namespaces: rename or delete one of them",
				d.Name, owner.Namespace, owner.Name))},
	}
}

// finalize deletes the identity keys that name the Device (only when it is
// the device id's owner) and drops the finalizer.
func (r *DeviceReconciler) finalize(ctx context.Context, d *fleetv1.Device, served bool) error {
	if !controllerutil.ContainsFinalizer(d, FinalizerDeviceIdentity) {
		return nil
	}
	if served {
		subjects := []string{d.Spec.IdentitySubject}
		if reg := d.Annotations[AnnotationRegisteredIdentity]; reg != "" && reg != d.Spec.IdentitySubject {
			subjects = append(subjects, reg)
		}
		for _, s := range subjects {
			if err := r.unregister(ctx, s, d.Name); err != nil {
				return err
			}
		}
		r.telemetry.forget(d.Name)
	}
	controllerutil.RemoveFinalizer(d, FinalizerDeviceIdentity)
	if err := r.Client.Update(ctx, d); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("remove finalizer of Device %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

// identityKV returns the fleet-identity bucket.
func (r *DeviceReconciler) identityKV(ctx context.Context) (jetstream.KeyValue, error) {
	r.kvMu.Lock()
	defer r.kvMu.Unlock()
	if r.kv != nil {
		return r.kv, nil
	}
	kv, err := r.Store.JetStream().KeyValue(ctx, events.BucketIdentity)
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", events.BucketIdentity, err)
	}
	r.kv = kv
	return kv, nil
}

// readIdentity returns the entry of an identity subject; nil when there is
// none.
func (r *DeviceReconciler) readIdentity(ctx context.Context, subject string) (jetstream.KeyValueEntry, string, error) {
	key, err := events.IdentityKey(subject)
	if err != nil {
		return nil, "", err // CRD validation prevents this
	}
	kv, err := r.identityKV(ctx)
	if err != nil {
		return nil, key, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return nil, key, nil
	}
	if err != nil {
		return nil, key, fmt.Errorf("read %s/%s: %w", events.BucketIdentity, key, err)
	}
	return e, key, nil
}

// unregister deletes the identity key of subject if its value names device;
// a key of another device is left alone. Idempotent.
func (r *DeviceReconciler) unregister(ctx context.Context, subject, device string) error {
	e, key, err := r.readIdentity(ctx, subject)
	if err != nil || e == nil {
		return err
	}
	if v, err := events.DecodeIdentityEntry(e.Value()); err == nil && v.Device != device {
		return nil
	}
	kv, err := r.identityKV(ctx)
	if err != nil {
		return err
	}
	err = kv.Delete(ctx, key, jetstream.LastRevision(e.Revision()))
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete %s/%s: %w", events.BucketIdentity, key, err)
	}
	r.Log.InfoContext(ctx, "identity unregistered", "device", device, "key", key)
	return nil
}

// kvRaceRetry is how soon a Device looks again after another writer changed
// its identity key between the read and the write.
const kvRaceRetry = 100 * time.Millisecond

// kvRace reports whether a conditional KV write failed because another writer
// changed the key first.
func kvRace(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, jetstream.ErrKeyExists) ||
		(errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence)
}

// syncIdentity registers the Device's identity subject: it moves the
// registration annotation (deleting the old key first) or writes the
// fleet-identity value. acted says it changed the Device (the watch calls
// again) or lost a race (retry says when to look again); otherwise idc is the
// IdentityRegistered condition, and retry > 0 when the key belongs to another
// device.
func (r *DeviceReconciler) syncIdentity(ctx context.Context, d *fleetv1.Device) (acted bool, idc metav1.Condition, retry time.Duration, err error) {
	reg := d.Annotations[AnnotationRegisteredIdentity]
	if reg != d.Spec.IdentitySubject {
		if reg != "" {
			if err := r.unregister(ctx, reg, d.Name); err != nil {
				return false, idc, 0, err
			}
		}
		orig := d.DeepCopy()
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[AnnotationRegisteredIdentity] = d.Spec.IdentitySubject
		if err := r.Client.Patch(ctx, d, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return false, idc, 0, fmt.Errorf("record identity of Device %s/%s: %w", d.Namespace, d.Name, err)
		}
		return true, idc, 0, nil
	}
	_, quarantined := d.Labels[fleetv1.LabelBlacklist]
	want, err := events.IdentityEntry{Device: d.Name, Quarantined: quarantined}.Encode()
	if err != nil {
		return false, idc, 0, err // CRD validation prevents this: a Device's name is a device token
	}
	e, key, err := r.readIdentity(ctx, d.Spec.IdentitySubject)
	if err != nil {
		return false, idc, 0, err
	}
	kv, err := r.identityKV(ctx)
	if err != nil {
		return false, idc, 0, err
	}
	registered := condition(d, ConditionIdentityRegistered, metav1.ConditionTrue, ReasonRegistered,
		fmt.Sprintf("the fleet-identity key %s names this device", key))
	switch {
	case e == nil:
		_, err := kv.Create(ctx, key, want)
		if kvRace(err) {
			return true, idc, kvRaceRetry, nil
		}
		if err != nil {
			return false, idc, 0, fmt.Errorf("write %s/%s: %w", events.BucketIdentity, key, err)
		}
	case string(e.Value()) == string(want):
		return false, registered, 0, nil
	default:
		if cur, err := events.DecodeIdentityEntry(e.Value()); err == nil && cur.Device != d.Name {
			r.Log.WarnContext(ctx, "identity subject already registered to another device; fix spec.identitySubject",
				"device", d.Name, "namespace", d.Namespace, "key", key, "registeredTo", cur.Device)
			inUse := condition(d, ConditionIdentityRegistered, metav1.ConditionFalse, ReasonIdentityInUse,
				fmt.Sprintf("identity subject %s is registered to device %s: give this Device its own spec.identitySubject", key, cur.Device))
			return false, inUse, identityConflictRetry, nil
		}
		_, err := kv.Update(ctx, key, want, e.Revision())
		if kvRace(err) {
			return true, idc, kvRaceRetry, nil
		}
		if err != nil {
			return false, idc, 0, fmt.Errorf("write %s/%s: %w", events.BucketIdentity, key, err)
		}
	}
	r.Log.InfoContext(ctx, "identity registered", "device", d.Name, "key", key, "quarantined", quarantined)
	return false, registered, 0, nil
}

// syncReports brings status and labels to what the device last reported:
// first the status (claiming new report-owned label keys), then the labels,
// then the status again to release keys no longer reported.
func (r *DeviceReconciler) syncReports(ctx context.Context, d *fleetv1.Device, idc metav1.Condition) (ctrl.Result, error) {
	if err := r.loadReports(ctx, d.Name); err != nil {
		return ctrl.Result{}, err
	}
	_, inv, invSeq := r.telemetry.snapshot(d.Name)
	now := time.Now()
	liveness, hb := r.telemetry.decide(d.Name, now, r.StaleAfter)
	// While Online, look again when the last heartbeat would turn stale, on
	// every path (a write's own watch event may be the no-op of a racing
	// writer); a little jitter spreads devices that came online together.
	var next ctrl.Result
	if liveness == fleetv1.LivenessOnline {
		in := hb.Add(r.StaleAfter).Sub(now) + rand.N(r.StaleAfter/50+time.Millisecond)
		next.RequeueAfter = max(in, time.Millisecond)
	}

	owned := d.Status.ReportedLabels
	newLabels, newOwned := d.Labels, owned
	inventory := d.Status.Inventory
	if invSeq > 0 {
		newLabels, newOwned = MergeReportedLabels(d.Labels, owned, inv.Labels)
		inventory = &fleetv1.DeviceInventory{OS: inv.OS, Arch: inv.Arch, Kernel: inv.Kernel, AgentVersion: inv.AgentVersion}
	}
	labelsChange := !maps.Equal(newLabels, d.Labels)
	statusOwned := newOwned
	if labelsChange {
		statusOwned = claimedLabels(owned, newOwned)
	}

	want := fleetv1.DeviceStatus{
		Liveness:       liveness,
		LastHeartbeat:  d.Status.LastHeartbeat,
		Inventory:      inventory,
		ReportedLabels: statusOwned,
		Conditions:     []metav1.Condition{r.onlineCondition(d, liveness, hb), idc},
	}
	if liveness != d.Status.Liveness {
		want.LastHeartbeat = heartbeatTime(hb)
	}
	if !statusEqual(want, d.Status) {
		// Writing anyway: refresh lastHeartbeat for free.
		want.LastHeartbeat = heartbeatTime(hb)
		return next, r.applyStatus(ctx, d, want)
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

// loadReports fills the telemetry view from the stream for a device the
// consumer has not delivered yet (it may still be catching up).
func (r *DeviceReconciler) loadReports(ctx context.Context, device string) error {
	hb, _, invSeq := r.telemetry.snapshot(device)
	if hb.IsZero() {
		rec, err := r.last(ctx, device, events.ReportHeartbeat)
		if err != nil {
			return err
		}
		if rec != nil {
			r.telemetry.heartbeat(device, rec.Stored)
		}
	}
	if invSeq == 0 {
		rec, err := r.last(ctx, device, events.ReportInventory)
		if err != nil {
			return err
		}
		if rec != nil {
			inv, err := events.Decode[events.DeviceInventory](rec.Event)
			if err != nil {
				// A bad report must not stall the Device: keep what is known.
				r.Skips.Skip(ctx, r.Log, events.InvalidData(*rec, err))
				return nil
			}
			r.telemetry.inventory(device, rec.Sequence, inv)
		}
	}
	return nil
}

func (r *DeviceReconciler) last(ctx context.Context, device string, kind events.ReportKind) (*events.Record, error) {
	subject, err := events.ReportSubject(device, kind)
	if err != nil {
		return nil, err
	}
	rec, err := r.Store.Last(ctx, subject)
	if errors.Is(err, events.ErrNotFound) {
		return nil, nil
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

func (r *DeviceReconciler) onlineCondition(d *fleetv1.Device, l fleetv1.Liveness, hb time.Time) metav1.Condition {
	switch l {
	case fleetv1.LivenessOnline:
		return condition(d, fleetv1.ConditionOnline, metav1.ConditionTrue, ReasonHeartbeating, fmt.Sprintf("heartbeats arrive within %s", r.StaleAfter))
	case fleetv1.LivenessStale:
		return condition(d, fleetv1.ConditionOnline, metav1.ConditionFalse, ReasonHeartbeatMissed,
			fmt.Sprintf("no heartbeat for %s since %s", r.StaleAfter, hb.UTC().Truncate(time.Second).Format(time.RFC3339)))
	default:
		return condition(d, fleetv1.ConditionOnline, metav1.ConditionUnknown, ReasonNoHeartbeat, "no heartbeat received yet")
	}
}

// condition builds a condition, keeping the transition time of the current
// one when its status is unchanged.
func condition(d *fleetv1.Device, typ string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
	c := metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg,
		ObservedGeneration: d.Generation, LastTransitionTime: metav1.NewTime(time.Now().Truncate(time.Second))}
	if cur := meta.FindStatusCondition(d.Status.Conditions, typ); cur != nil && cur.Status == s {
		c.LastTransitionTime = cur.LastTransitionTime
	}
	return c
}

// statusEqual compares the fields the controller owns: a is the wanted
// status, b the current one.
func statusEqual(a, b fleetv1.DeviceStatus) bool {
	if a.Liveness != b.Liveness || !maps.Equal(a.ReportedLabels, b.ReportedLabels) {
		return false
	}
	if (a.LastHeartbeat == nil) != (b.LastHeartbeat == nil) || (a.LastHeartbeat != nil && !a.LastHeartbeat.Equal(b.LastHeartbeat)) {
		return false
	}
	if (a.Inventory == nil) != (b.Inventory == nil) || (a.Inventory != nil && *a.Inventory != *b.Inventory) {
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

// applyStatus writes want when it differs from the current status.
func (r *DeviceReconciler) applyStatus(ctx context.Context, d *fleetv1.Device, want fleetv1.DeviceStatus) error {
	if statusEqual(want, d.Status) {
		return nil
	}
	if err := applyStatus(ctx, r.Client, "Device", d.Namespace, d.Name, &want, FieldOwnerDevices); err != nil {
		return err
	}
	r.Log.InfoContext(ctx, "device status", "device", d.Name, "namespace", d.Namespace, "liveness", want.Liveness,
		"reason", want.Conditions[0].Reason)
	return nil
}

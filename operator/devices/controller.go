// The Device controller: which Device serves a device id, the finalizer, and
// the order of one reconcile. Identity registration is in identity.go,
// status and labels from the device's reports in status.go.

package devices

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/leader"
	"github.com/nationtech/harmony-fleet/operator/internal/requeue"
)

// Store is what the Device controller needs of the event store
// (*events.Store): direct gets of the last report on a subject, the follow
// of every device's telemetry (a projections/runner reader), and the
// JetStream handle for the fleet-identity bucket.
type Store interface {
	Last(ctx context.Context, subject string) (events.Record, error)
	ReplaySubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error]
	FollowSubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error]
	JetStream() jetstream.JetStream
}

// DefaultStaleAfter is how long a device stays Online after its last
// heartbeat when Options.StaleAfter is zero.
const DefaultStaleAfter = 90 * time.Second

// DefaultDeviceWorkers is how many Devices the Device controller reconciles
// at once when Reconciler.Workers is zero. A reconcile mostly waits on
// the API server and JetStream (a few milliseconds each): one worker
// projects about 40 Devices a second, whatever the servers could take.
const DefaultDeviceWorkers = 8

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

// Reconciler projects device reports onto Device status and labels
// and keeps the fleet-identity KV in sync with Devices. Status is written on
// transitions only (liveness, inventory, labels), never per heartbeat.
type Reconciler struct {
	// Client should read from the manager's cache (it uses IndexDeviceID).
	Client client.Client
	// Store gives the reports and the fleet-identity bucket.
	Store Store
	// StaleAfter: a device is Stale once its last heartbeat is this old.
	// Default DefaultStaleAfter.
	StaleAfter time.Duration
	// Connections, when set, is the NATS servers' view of the device
	// connections (ADR 0032; presence.Tracker): a device with a
	// connection up is Online, one without turns Stale StaleAfter after
	// its last connection went or its last heartbeat, whichever is later.
	// It runs on the leader only, and calls ConnectionChanged (set it as
	// its change callback). Nil: liveness from heartbeats only (ADR 0024).
	Connections Connections
	// Log receives the controller's records; nil: discard.
	Log *slog.Logger
	// Skips counts the device reports the controller skips because they do
	// not decode. Nil-safe.
	Skips *events.SkipCounter
	// Metrics, when set, counts Devices by liveness, trimmed inventories
	// and container restarts (NewMetrics). Nil records nothing.
	Metrics *Metrics
	// Workers is how many Devices are reconciled at once. Default
	// DefaultDeviceWorkers.
	Workers int
	// Now, when set, is the clock the controller decides by (tests):
	// liveness against the heartbeats' stream times, and when a Device's
	// status.workloads may be written again (WorkloadsInterval). Nil:
	// time.Now.
	Now func() time.Time

	telemetry *telemetry
	// wake enqueues Devices named by a report or a connection change;
	// connCtx is the context Connections runs with on the leader.
	wake    chan event.GenericEvent
	connCtx atomic.Pointer[context.Context]

	kvMu sync.Mutex
	kv   jetstream.KeyValue // the fleet-identity bucket, resolved once; guarded by kvMu
	// idSnap is the bucket read in one pass at the start.
	idSnap identitySnapshot
}

// SetupWithManager registers the field index, the telemetry consumer (one
// per operator, for all devices) and the controller.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.StaleAfter < 0 {
		return fmt.Errorf("device controller: stale-after is %s: use a positive duration (default %s)", r.StaleAfter, DefaultStaleAfter)
	}
	if r.StaleAfter == 0 {
		r.StaleAfter = DefaultStaleAfter
	}
	if r.Workers < 0 {
		return fmt.Errorf("device controller: workers is %d: use a positive count (default %d)", r.Workers, DefaultDeviceWorkers)
	}
	if r.Workers == 0 {
		r.Workers = DefaultDeviceWorkers
	}
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	r.telemetry = newTelemetry(r.Metrics)
	r.telemetry.follow()
	err := mgr.GetFieldIndexer().IndexField(context.Background(), &fleetv1.Device{}, IndexDeviceID,
		func(o client.Object) []string { return []string{o.GetName()} })
	if err != nil {
		return fmt.Errorf("device controller: index %s: %w", IndexDeviceID, err)
	}
	wake := make(chan event.GenericEvent)
	r.wake = wake
	err = mgr.Add(leader.Only(func(ctx context.Context) error {
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil // ctx ended first
		}
		return r.followTelemetry(ctx, wake)
	}))
	if err != nil {
		return fmt.Errorf("device controller: %w", err)
	}
	if r.Connections != nil {
		err = mgr.Add(leader.Only(func(ctx context.Context) error {
			if !mgr.GetCache().WaitForCacheSync(ctx) {
				return nil // ctx ended first
			}
			r.connCtx.Store(&ctx)
			return r.Connections.Run(ctx)
		}))
		if err != nil {
			return fmt.Errorf("device controller: %w", err)
		}
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1.Device{}).
		Named("fleet-device").
		WithOptions(controller.Options{MaxConcurrentReconciles: r.Workers}).
		Watches(&fleetv1.Device{}, handler.EnqueueRequestsFromMapFunc(r.namesakes)).
		WatchesRawSource(source.Channel(wake, &handler.EnqueueRequestForObject{})).
		Complete(r)
}

// namesakes maps a Device event to the other Devices with the same name, so
// a younger namesake is served as soon as the older one goes.
func (r *Reconciler) namesakes(ctx context.Context, o client.Object) []reconcile.Request {
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

// reconcile serves only the oldest Device of a name; for it, in order: the
// finalizer with the identity annotation (one write), the fleet-identity
// value, status, labels; on deletion, it deletes the identity key and drops
// the finalizer. A call that wrote the Device's metadata ends after the
// fleet-identity value: the Device's watch calls again for the rest. While
// the device is Online it asks to be called again when its last heartbeat
// would turn stale. Calls for different Devices run concurrently (Workers);
// controller-runtime never runs two for one Device at once.
func (r *Reconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
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
		return ctrl.Result{}, r.WriteStatus(ctx, &d, duplicateStatus(&d, older))
	}
	wrote := false
	if !controllerutil.ContainsFinalizer(&d, FinalizerDeviceIdentity) {
		if err := r.addFinalizer(ctx, &d); err != nil {
			return ctrl.Result{}, err
		}
		wrote = true
	}
	id, err := r.syncIdentity(ctx, &d)
	if err != nil || id.acted || wrote {
		// After a write of the Device the cache is behind: the status is
		// written by the call its watch event brings, from the fresh object.
		return ctrl.Result{RequeueAfter: id.retry}, err
	}
	res, err := r.syncReports(ctx, &d, id.registered)
	if id.retry > 0 && (res.RequeueAfter == 0 || id.retry < res.RequeueAfter) {
		res.RequeueAfter = id.retry
	}
	return res, err
}

// addFinalizer adds the finalizer and, for a Device that never registered an
// identity subject, the annotation recording spec.identitySubject, in one
// write (the fleet-identity value may be written once the finalizer is
// stored: a deletion then waits for the key's removal). d becomes the
// stored object. A Device with another subject recorded keeps it: the move
// (delete the old key first) is syncIdentity's.
func (r *Reconciler) addFinalizer(ctx context.Context, d *fleetv1.Device) error {
	controllerutil.AddFinalizer(d, FinalizerDeviceIdentity)
	if d.Annotations[AnnotationRegisteredIdentity] == "" {
		if d.Annotations == nil {
			d.Annotations = map[string]string{}
		}
		d.Annotations[AnnotationRegisteredIdentity] = d.Spec.IdentitySubject
	}
	if err := r.Client.Update(ctx, d); err != nil {
		return fmt.Errorf("add finalizer of Device %s/%s: %w", d.Namespace, d.Name, err)
	}
	return nil
}

// Reconcile wraps reconcile: a write that lost an optimistic-concurrency race
// (another writer changed the Device first) is retried soon with the fresh
// object, without an error log.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, err := r.reconcile(ctx, req)
	switch {
	case err != nil && ctx.Err() != nil:
		return ctrl.Result{}, nil // stopping
	case apierrors.IsConflict(err):
		return ctrl.Result{RequeueAfter: requeue.StatusConflict()}, nil
	}
	return res, err
}

// olderNamesake returns the Device that owns d's device id when it is not d:
// the oldest Device of that name across namespaces (ties broken by
// namespace). Device ids are cluster-unique this way: reports and
// fleet-identity values name the device only.
func (r *Reconciler) olderNamesake(ctx context.Context, d *fleetv1.Device) (*fleetv1.Device, error) {
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
		Conditions: []metav1.Condition{deviceCondition(d, fleetv1.ConditionOnline, metav1.ConditionFalse, fleetv1.ReasonDuplicateDeviceID,
			fmt.Sprintf("device id %s is already the Device %s/%s (created earlier); device ids are unique across namespaces: rename or delete one of them",
				d.Name, owner.Namespace, owner.Name))},
	}
}

// deviceCondition builds a condition of the Device's generation; its
// lastTransitionTime is set when the status is written (ownConditions).
func deviceCondition(d *fleetv1.Device, typ string, s metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: s, Reason: reason, Message: msg, ObservedGeneration: d.Generation}
}

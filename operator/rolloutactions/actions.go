package rolloutactions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	kevents "k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	intentsubj "github.com/nationtech/harmony-fleet/operator/internal/intent"
	"github.com/nationtech/harmony-fleet/operator/internal/requeue"
)

// Reasons of the Kubernetes Events the rollout-action controller writes on
// a Deployment.
const (
	// EventReasonRolloutActionRecorded (Normal): the request was appended
	// to the Deployment's rollout subject.
	EventReasonRolloutActionRecorded = "RolloutActionRecorded"
	// EventReasonRolloutActionInvalid (Warning): the annotation does not
	// parse; nothing was appended.
	EventReasonRolloutActionInvalid = "InvalidRolloutAction"
	// EventReasonRolloutActionStale (Warning): the request names another
	// generation than the Deployment's, now or when the controller first
	// saw it; nothing was appended and the annotation is removed.
	EventReasonRolloutActionStale = "StaleRolloutAction"
)

// eventActionRecord is the action of the Events the controller writes.
const eventActionRecord = "RecordRolloutAction"

// maxEventNote bounds an Event's note (the API refuses more than 1 kB).
const maxEventNote = 1000

// RolloutActions turns each Deployment's rollout-action annotation
// (fleetv1.AnnotationRolloutAction, ADR 0016) into one rollout transition:
// rollout.paused, rollout.resumed or rollout.approved on the Deployment's
// rollout subject, with the request's by, request id and batch and the
// revision's UID, generation and id. It appends with the subject's
// expected last sequence, like the rollout runner, and records a request
// id at most once per Deployment: it reads the subject's requests first,
// so a request already there (an operator restart, a second replica, the
// annotation written again) appends nothing. A value that does not parse
// appends nothing and is answered by a Warning Event on the Deployment.
//
// A request counts only for the generation the Deployment had when it was
// written (the admission policy refuses any other). The controller cannot
// know when the annotation was written, so a request not recorded yet is
// stale when its generation is not the Deployment's now, or was not the
// Deployment's when this process first saw that value (a watch event
// carries the object as the write that set it left it): it is removed from
// the Deployment (a JSON patch that tests the value first, so a newer
// request is never removed), appends nothing, and is answered by a Warning
// Event. The removal makes the refusal durable: after a spec change and a
// restart, a request written ahead for the new generation is no longer
// there to be recorded (ADR 0016, "Addendum: a request counts for the
// generation it was written at").
//
// It does not judge whether the action means anything now (approving the
// batch that waits, resuming a paused rollout): the rollout fold decides
// that from the events. Who asked is checked by the API server's admission
// policy (k8s/config/admission), not here.
type RolloutActions struct {
	Client client.Client
	Store  intentsubj.Store
	Reader intentsubj.Reader
	// Recorder writes the Events on the Deployment; nil: they are only
	// logged.
	Recorder kevents.EventRecorder
	Log      *slog.Logger
	// Skips counts rollout records that do not decode. Nil-safe.
	Skips *events.SkipCounter
	// Stamp, when set, is applied last to the events the controller
	// builds (Options.EventStamp, tests only).
	Stamp events.Option

	mu sync.Mutex // guards seen
	// seen is, per Deployment UID, the annotation value this process saw
	// last and the Deployment's generation when it first saw that value.
	seen map[types.UID]seenAction
}

// seenAction is an annotation value and the Deployment's generation when
// the controller first saw it.
type seenAction struct {
	value      string
	generation int64
}

// see notes o's annotation value with o's generation, unless that value is
// noted already (it keeps the generation it was first seen at). Without
// the annotation it forgets o. Only the predicates call it: the object of
// a watch event is the object as the write that set the value left it,
// whereas the cache a reconcile reads may already hold a later write (the
// informer updates it before the predicates run).
func (r *RolloutActions) see(o client.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := o.GetAnnotations()[fleetv1.AnnotationRolloutAction]
	if !ok {
		delete(r.seen, o.GetUID())
		return
	}
	if s, ok := r.seen[o.GetUID()]; ok && s.value == v {
		return
	}
	if r.seen == nil {
		r.seen = map[types.UID]seenAction{}
	}
	r.seen[o.GetUID()] = seenAction{value: v, generation: o.GetGeneration()}
}

// seenAt returns the generation o had when the predicates first saw the
// annotation value v, and false when they have not seen it yet.
func (r *RolloutActions) seenAt(o client.Object, v string) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.seen[o.GetUID()]
	if !ok || s.value != v {
		return 0, false
	}
	return s.generation, true
}

// forget drops what see noted of o.
func (r *RolloutActions) forget(o client.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.seen, o.GetUID())
}

// SetupWithManager registers the controller: it looks at a Deployment when
// it is first seen with the annotation and whenever the annotation's value
// changes.
func (r *RolloutActions) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1.Deployment{}, builder.WithPredicates(r.rolloutActionChanged())).
		Named("fleet-rollout-actions").
		Complete(r)
}

// WatchUpdate passes an update of a Deployment from old to updated through
// the rollout-action controller's predicate, as its watch does, and
// reports whether the update is reconciled.
func (r *RolloutActions) WatchUpdate(old, updated *fleetv1.Deployment) bool {
	return r.rolloutActionChanged().Update(event.UpdateEvent{ObjectOld: old, ObjectNew: updated})
}

// WatchCreate passes a Deployment through the rollout-action controller's
// predicate as its watch does when it first lists it (a started or
// restarted operator), and reports whether it is reconciled.
func (r *RolloutActions) WatchCreate(d *fleetv1.Deployment) bool {
	return r.rolloutActionChanged().Create(event.CreateEvent{Object: d})
}

// rolloutActionChanged passes a Deployment that carries the annotation when
// first seen, and an update that sets or changes it. It notes each value
// with the generation of the object the event carries (see): for an update
// that is the generation the write left, before a later spec change can
// reach the reconcile.
func (r *RolloutActions) rolloutActionChanged() predicate.Funcs {
	value := func(o client.Object) (string, bool) {
		v, ok := o.GetAnnotations()[fleetv1.AnnotationRolloutAction]
		return v, ok
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { r.see(e.Object); _, ok := value(e.Object); return ok },
		UpdateFunc: func(e event.UpdateEvent) bool {
			r.see(e.ObjectNew)
			v, ok := value(e.ObjectNew)
			old, oldOK := value(e.ObjectOld)
			return ok && (!oldOK || old != v)
		},
		DeleteFunc:  func(e event.DeleteEvent) bool { r.forget(e.Object); return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// Reconcile does the work of reconcile; a stall (requeue.Stall: a lost
// append race, a wait) is a requeue after its wait, without an error.
func (r *RolloutActions) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	return requeue.Result(r.reconcile(ctx, req))
}

// reconcile records the Deployment's current request, if it is new.
func (r *RolloutActions) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var d fleetv1.Deployment
	if err := r.Client.Get(ctx, req.NamespacedName, &d); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	raw, ok := d.Annotations[fleetv1.AnnotationRolloutAction]
	if !ok || !d.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	a, err := fleetv1.ParseRolloutAction(raw)
	if err != nil {
		r.event(ctx, &d, corev1.EventTypeWarning, EventReasonRolloutActionInvalid, "nothing recorded: %v", err)
		return ctrl.Result{}, nil
	}
	rollout, err := events.DeploymentRolloutSubject(d.Namespace, d.Name)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("deployment %s: %w", req, err) // CRD validation prevents this
	}
	head, err := intentsubj.ReadHead(ctx, r.Store, r.Reader, r.Skips, r.Log, rollout)
	if err != nil {
		return ctrl.Result{}, err
	}
	recorded, err := r.recorded(ctx, rollout, head.Seq, string(d.UID), a.Request)
	if err != nil {
		return ctrl.Result{}, err
	}
	if recorded {
		r.Log.DebugContext(ctx, "rollout request already recorded", "deployment", req.String(), "request", a.Request)
		return ctrl.Result{}, nil
	}
	seenAt, ok := r.seenAt(&d, raw)
	if !ok {
		// Read from a cache the informer updated before the predicates
		// ran: the watch event of the write that set the value comes
		// with the generation to judge it by.
		r.Log.DebugContext(ctx, "rollout request waits for its watch event", "deployment", req.String(), "request", a.Request)
		return ctrl.Result{}, requeue.UntilSeen()
	}
	if a.Generation != d.Generation || a.Generation != seenAt {
		// Removed first: once the Warning is out, the request is gone
		// (a restart after a spec change finds nothing to record).
		at := fmt.Sprintf("the Deployment is at generation %d", d.Generation)
		if a.Generation == d.Generation {
			at = fmt.Sprintf("the Deployment was at generation %d when it was written", seenAt)
		}
		ok, err := r.remove(ctx, &d, raw)
		removed := "the annotation is removed"
		switch {
		case err != nil:
			removed = "removing the annotation failed, retrying"
		case !ok:
			removed = "the annotation has changed since"
		}
		r.event(ctx, &d, corev1.EventTypeWarning, EventReasonRolloutActionStale,
			"nothing recorded: request %s (%s by %s) is for generation %d, %s: %s; write a new request for generation %d",
			a.Request, a.Action, a.By, a.Generation, at, removed, d.Generation)
		return ctrl.Result{}, err
	}
	intent, err := events.DeploymentIntentSubject(d.Namespace, d.Name)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("deployment %s: %w", req, err)
	}
	ih, err := intentsubj.ReadHead(ctx, r.Store, r.Reader, r.Skips, r.Log, intent)
	if err != nil {
		return ctrl.Result{}, err
	}
	rev, ok := intentsubj.AppendedRevision(ih.Last, &d)
	if !ok || rev.Generation != d.Generation {
		// The Deployment controller appends it; the request waits for it.
		r.Log.DebugContext(ctx, "rollout request waits for its revision", "deployment", req.String(), "generation", d.Generation)
		return ctrl.Result{}, requeue.ForRevision()
	}
	tr := events.NewRolloutTransition(transitionOf(a.Action), events.RolloutTransition{
		UID: rev.UID, Generation: rev.Generation, RevisionID: rev.RevisionID, Batch: a.Batch, By: a.By, Request: a.Request})
	ev, err := events.New(events.Keys{Namespace: d.Namespace, Name: d.Name}, tr, intentsubj.Stamped(r.Stamp, events.WithCorrelation(rev.UID, rev.Generation))...)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("rollout request of %s: %w", req, err)
	}
	pos, err := r.Store.Append(ctx, ev, events.ExpectLastSubjectSequence(head.Seq))
	if errors.Is(err, events.ErrConflict) {
		// The runner (or another replica) appended first: re-read, the
		// request may be there now.
		r.Log.DebugContext(ctx, "rollout request append conflict, re-reading", "deployment", req.String(), "request", a.Request)
		return ctrl.Result{}, requeue.Conflict(err)
	}
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("append %s of %s: %w", tr.EventType(), req, err)
	}
	r.Log.InfoContext(ctx, "rollout request recorded", "deployment", req.String(), "type", tr.EventType(), "by", a.By,
		"request", a.Request, "batch", a.Batch, "revision", rev.RevisionID, "sequence", pos.Sequence)
	r.event(ctx, &d, corev1.EventTypeNormal, EventReasonRolloutActionRecorded, "%s by %s recorded (request %s, revision %s)",
		tr.EventType(), a.By, a.Request, rev.RevisionID)
	return ctrl.Result{}, nil
}

// remove deletes the annotation from d if it still holds value, and
// reports whether it did: a JSON patch testing the value, so a request
// written since is left alone.
func (r *RolloutActions) remove(ctx context.Context, d *fleetv1.Deployment, value string) (bool, error) {
	path := "/metadata/annotations/" + jsonPointerEscape(fleetv1.AnnotationRolloutAction)
	patch, err := json.Marshal([]map[string]any{{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}})
	if err != nil {
		return false, fmt.Errorf("remove the stale rollout request of %s/%s: %w", d.Namespace, d.Name, err)
	}
	err = r.Client.Patch(ctx, d, client.RawPatch(types.JSONPatchType, patch))
	switch {
	case apierrors.IsNotFound(err), apierrors.IsInvalid(err):
		// Deleted, or the value changed (the test failed): a new value
		// is looked at on its own.
		r.Log.DebugContext(ctx, "stale rollout request not removed", "deployment", d.Namespace+"/"+d.Name, "reason", err)
		return false, nil
	case err != nil:
		return false, fmt.Errorf("remove the stale rollout request of %s/%s: %w", d.Namespace, d.Name, err)
	}
	// What see noted stays until the watch event of the removal: an
	// event of a write made before it (a spec change) still carries the
	// value and must find it noted at its first generation.
	return true, nil
}

// jsonPointerEscape escapes a JSON pointer reference token (RFC 6901).
func jsonPointerEscape(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

// transitionOf is the event type of an action (validated by the parser).
func transitionOf(a fleetv1.RolloutActionKind) events.Type {
	switch a {
	case fleetv1.RolloutActionPause:
		return events.TypeRolloutPaused
	case fleetv1.RolloutActionResume:
		return events.TypeRolloutResumed
	default:
		return events.TypeRolloutApproved
	}
}

// recorded reports whether the rollout subject holds, up to sequence last,
// a request with this id for the Deployment uid (request ids are unique,
// so one recorded for an earlier generation is not recorded again either).
func (r *RolloutActions) recorded(ctx context.Context, subject string, last uint64, uid, request string) (bool, error) {
	if last == 0 {
		return false, nil
	}
	for rec, err := range r.Reader.Replay(ctx, subject, events.FromStart()) {
		if re, skip := events.AsRecordError(err); skip {
			if re.Sequence >= last {
				break
			}
			continue // counted by readHead when last; the runner counts the others
		}
		if err != nil {
			return false, fmt.Errorf("read rollout of %s: %w", subject, err)
		}
		if rec.Sequence > last {
			break
		}
		switch rec.Event.Type {
		case events.TypeRolloutPaused, events.TypeRolloutResumed, events.TypeRolloutApproved:
			tr, err := events.Decode[events.RolloutTransition](rec.Event)
			if err == nil && tr.UID == uid && tr.Request == request {
				return true, nil
			}
		}
		if rec.Sequence == last {
			break
		}
	}
	return false, nil
}

// event writes a Kubernetes Event on d (and logs it).
func (r *RolloutActions) event(ctx context.Context, d *fleetv1.Deployment, typ, reason, format string, args ...any) {
	note := fmt.Sprintf(format, args...)
	if len(note) > maxEventNote {
		note = note[:maxEventNote-3]
		for !utf8.ValidString(note) {
			note = note[:len(note)-1]
		}
		note += "..."
	}
	level := slog.LevelInfo
	if typ == corev1.EventTypeWarning {
		level = slog.LevelWarn
	}
	r.Log.Log(ctx, level, "rollout request", "deployment", d.Namespace+"/"+d.Name, "reason", reason, "note", note)
	if r.Recorder != nil {
		r.Recorder.Eventf(d, nil, typ, reason, eventActionRecord, "%s", note)
	}
}

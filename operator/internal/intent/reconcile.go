package intent

import (
	"context"
	"fmt"
	"log/slog"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/nationtech/harmony-fleet/events"
)

// Opened is an object a freezing role (Deployments, TaskRuns) reconciles,
// with its intent subject and where that subject stands.
type Opened struct {
	Subject string
	Head    Head
}

// Opener opens the objects of one freezing role: it reads the object and
// the head of its intent subject, the first steps of every reconcile of
// a Deployment or a TaskRun.
type Opener struct {
	Client client.Client
	Store  Store
	// Reader, when set, replays a subject whose last record does not
	// decode (ReadHead).
	Reader Reader
	Skips  *events.SkipCounter
	Log    *slog.Logger
	// Kind names the objects in errors ("deployment", "taskrun").
	Kind string
	// SubjectOf is the object's intent subject.
	SubjectOf func(namespace, name string) (string, error)
}

// Open reads req's object into obj and its subject's head; found is false
// when the object is gone (nothing to do).
func (o Opener) Open(ctx context.Context, req ctrl.Request, obj client.Object) (op Opened, found bool, err error) {
	if err := o.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return Opened{}, false, client.IgnoreNotFound(err)
	}
	subject, err := o.SubjectOf(obj.GetNamespace(), obj.GetName())
	if err != nil {
		return Opened{}, false, fmt.Errorf("%s %s: %w", o.Kind, req, err) // CRD validation prevents this
	}
	head, err := ReadHead(ctx, o.Store, o.Reader, o.Skips, o.Log, subject)
	if err != nil {
		return Opened{}, false, err
	}
	return Opened{Subject: subject, Head: head}, true, nil
}

// AddFinalizer adds finalizer to obj unless it has it, and reports whether
// it wrote: a patch of the finalizers only, with an optimistic lock (an
// update would re-encode the spec from the Go types and could drop fields
// the user wrote, such as empty lists, bumping the generation). A reconcile
// that wrote ends there: the object's watch calls it again.
func AddFinalizer(ctx context.Context, c client.Client, obj client.Object, finalizer string) (wrote bool, err error) {
	if controllerutil.ContainsFinalizer(obj, finalizer) {
		return false, nil
	}
	orig := obj.DeepCopyObject().(client.Object)
	controllerutil.AddFinalizer(obj, finalizer)
	return true, c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

// Delete ends the deletion of obj (FinishDeletion) unless its finalizer is
// gone already: the deletion event T that ev builds is appended unless the
// subject's last event is already a T of obj's UID (uidOf reads it).
func Delete[T events.Data](ctx context.Context, c client.Client, store Store, log *slog.Logger, obj client.Object, finalizer string, op Opened,
	uidOf func(T) string, ev func() (events.Event, error)) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(obj, finalizer) {
		return ctrl.Result{}, nil
	}
	done := false
	if last := op.Head.Last; last != nil {
		if del, err := events.Decode[T](last.Event); err == nil && uidOf(del) == string(obj.GetUID()) {
			done = true
		}
	}
	return FinishDeletion(ctx, c, store, log, obj, finalizer, op.Subject, op.Head, done, ev)
}

// AppendInOrder appends an object's freezing events in order (a revision's
// or a TaskRun creation's target chunks, then the revision or the
// creation), each expecting the subject's last sequence, from seq (the
// head's). Chunks go first and the event that names them last: a crash or
// a lost race between them (events.ErrConflict) leaves orphan chunks that
// readers ignore, and the next attempt starts again from the subject's new
// last sequence (ADR 0010).
func AppendInOrder(ctx context.Context, store Store, evs []events.Event, seq uint64) error {
	for _, ev := range evs {
		pos, err := store.Append(ctx, ev, events.ExpectLastSubjectSequence(seq))
		if err != nil {
			return err
		}
		seq = pos.Sequence
	}
	return nil
}

// Package intent holds what the operator's roles share to write an
// object's intent subject: the event store and reader they need (Store,
// Reader), where a subject stands (Head, ReadHead), the revision a
// Deployment's subject ends with (AppendedRevision), the deletion event
// that ends it (FinishDeletion, Delete), and the test stamp every event the
// roles build takes last (Stamped); and the scaffolding of the roles that
// freeze an object's targets on it, Deployments and TaskRuns: opening the
// object with its subject (Opener), its finalizer (AddFinalizer) and the
// chunks-then-event append (AppendInOrder, ADR 0010). Imported by the roles
// of the operator only.
package intent

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/operator/internal/requeue"
)

// Store is what the controllers need of the event store.
type Store interface {
	Append(ctx context.Context, ev events.Event, opts ...events.AppendOption) (events.Position, error)
	Last(ctx context.Context, subject string) (events.Record, error)
}

// Reader is what the operator needs to read events: one
// subject filter, or several of one stream through one consumer.
type Reader interface {
	Replay(ctx context.Context, filter string, from events.Start) iter.Seq2[events.Record, error]
	Follow(ctx context.Context, filter string, from events.Start) iter.Seq2[events.Record, error]
	ReplaySubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error]
	FollowSubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error]
}

// Head is where an intent subject stands.
type Head struct {
	// Last is the last event that decodes (nil: none).
	Last *events.Record
	// Seq is the subject's last sequence (0: none): the one the next
	// append expects.
	Seq uint64
}

// ReadHead reads where an intent subject stands. When the last record does
// not decode (a JetStream answer aimed at the stream), it is skipped and
// counted: the sequence is still its own (the next append expects it), the
// event is the last one before it that decodes.
func ReadHead(ctx context.Context, store Store, reader Reader, skips *events.SkipCounter, log *slog.Logger, subject string) (Head, error) {
	rec, err := store.Last(ctx, subject)
	if errors.Is(err, events.ErrNotFound) {
		return Head{}, nil
	}
	if re, ok := events.AsRecordError(err); ok {
		skips.Skip(ctx, log, re)
		prev, err := lastDecodable(ctx, reader, subject)
		if err != nil {
			return Head{}, err
		}
		return Head{Last: prev, Seq: re.Sequence}, nil
	}
	if err != nil {
		return Head{}, fmt.Errorf("read intent of %s: %w", subject, err)
	}
	return Head{Last: &rec, Seq: rec.Sequence}, nil
}

// lastDecodable replays one intent subject (a handful of events) for its
// last record that decodes; nil when none does or there is no reader.
func lastDecodable(ctx context.Context, reader Reader, subject string) (*events.Record, error) {
	if reader == nil {
		return nil, nil
	}
	var last *events.Record
	for rec, err := range reader.Replay(ctx, subject, events.FromStart()) {
		if _, skip := events.AsRecordError(err); skip {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read intent of %s: %w", subject, err)
		}
		last = &rec
	}
	return last, nil
}

// FinishDeletion ends the deletion of a Deployment or TaskRun: unless done
// (the subject's last event already is this object's deletion), it appends
// the deletion event ev expecting the subject's last sequence (a conflict —
// another operator appended first — is a requeue.Conflict stall, which the
// caller's Reconcile turns into a re-read), then removes finalizer from
// obj. A deletion event is appended once per UID, also across operator
// restarts and racing operators.
func FinishDeletion(ctx context.Context, c client.Client, store Store, log *slog.Logger, obj client.Object, finalizer, subject string,
	head Head, done bool, ev func() (events.Event, error)) (ctrl.Result, error) {
	if !done {
		e, err := ev()
		if err != nil {
			return ctrl.Result{}, err
		}
		_, err = store.Append(ctx, e, events.ExpectLastSubjectSequence(head.Seq))
		if errors.Is(err, events.ErrConflict) {
			return ctrl.Result{}, requeue.Conflict(err)
		}
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("append deletion of %s: %w", subject, err)
		}
		log.InfoContext(ctx, "deletion appended", "subject", subject, "uid", obj.GetUID())
	}
	orig := obj.DeepCopyObject().(client.Object)
	controllerutil.RemoveFinalizer(obj, finalizer)
	if err := c.Patch(ctx, obj, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	return ctrl.Result{}, nil
}

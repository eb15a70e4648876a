package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/nationtech/harmony-fleet/events"
)

// finishDeletion ends the deletion of a Deployment or TaskRun: unless done
// (the subject's last event already is this object's deletion), it appends
// the deletion event ev expecting the subject's last sequence (a conflict —
// another operator appended first — requeues), then removes finalizer from
// obj. A deletion event is appended once per UID, also across operator
// restarts and racing operators.
func finishDeletion(ctx context.Context, c client.Client, store EventStore, log *slog.Logger, obj client.Object, finalizer, subject string,
	head intentHead, done bool, ev func() (events.Event, error)) (ctrl.Result, error) {
	if !done {
		e, err := ev()
		if err != nil {
			return ctrl.Result{}, err
		}
		_, err = store.Append(ctx, e, events.ExpectLastSubjectSequence(head.seq))
		if errors.Is(err, events.ErrConflict) {
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
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

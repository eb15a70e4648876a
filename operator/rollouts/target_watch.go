package rollouts

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// TargetWatch tells the rollout runner of Devices that can no longer take
// part in a rollout: deleted (gone, or being deleted) or quarantined (label
// blacklist). The runner removes each from the accounting of the rollouts
// in progress in its namespace that have it as a target
// (rollout.target-removed). A Device deleted while no operator ran is not
// seen here; the runner's target timeout removes it.
type TargetWatch struct {
	Client client.Client
	// Out receives the removals; the runner reads it (RolloutRunner.Removals).
	Out chan<- TargetRemoval
}

// SetupWithManager registers the watch.
func (w *TargetWatch) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&fleetv1.Device{}).
		Named("fleet-rollout-targets").
		Complete(w)
}

// Reconcile sends a removal for a Device that is gone, being deleted or
// quarantined; nothing for any other.
func (w *TargetWatch) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var d fleetv1.Device
	reason := ""
	err := w.Client.Get(ctx, req.NamespacedName, &d)
	switch {
	case apierrors.IsNotFound(err):
		reason = "deleted"
	case err != nil:
		return ctrl.Result{}, err
	case !d.DeletionTimestamp.IsZero():
		reason = "deleted"
	default:
		if _, q := d.Labels[fleetv1.LabelBlacklist]; q {
			reason = "quarantined"
		}
	}
	if reason == "" {
		return ctrl.Result{}, nil
	}
	select {
	case w.Out <- TargetRemoval{Namespace: req.Namespace, Device: req.Name, Reason: reason}:
	case <-ctx.Done():
	}
	return ctrl.Result{}, nil
}

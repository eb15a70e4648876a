package operator

import (
	"context"
	"log/slog"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/devices"
)

// SetRevisionChunkBytes makes revisions chunk their targets past n id bytes
// until the returned restore is called (0: the default).
func SetRevisionChunkBytes(n int) (restore func()) {
	old := revisionChunkBytes
	revisionChunkBytes = n
	return func() { revisionChunkBytes = old }
}

// ApplyDeviceStatus writes want as the Device controller writes a status it
// decided from d.
func ApplyDeviceStatus(ctx context.Context, c client.Client, d *fleetv1.Device, want fleetv1.DeviceStatus) error {
	r := &devices.Reconciler{Client: c, Log: slog.New(slog.DiscardHandler)}
	return r.WriteStatus(ctx, d, want)
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

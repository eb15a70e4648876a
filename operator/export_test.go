package operator

import (
	"context"
	"log/slog"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/deployments"
	"github.com/nationtech/harmony-fleet/operator/devices"
	"github.com/nationtech/harmony-fleet/operator/taskruns"
)

// SetRevisionChunkBytes makes revisions chunk their targets past n id bytes
// until the returned restore is called (deployments.SetRevisionChunkBytes).
func SetRevisionChunkBytes(n int) (restore func()) { return deployments.SetRevisionChunkBytes(n) }

// ApplyDeviceStatus writes want as the Device controller writes a status it
// decided from d.
func ApplyDeviceStatus(ctx context.Context, c client.Client, d *fleetv1.Device, want fleetv1.DeviceStatus) error {
	r := &devices.Reconciler{Client: c, Log: slog.New(slog.DiscardHandler)}
	return r.WriteStatus(ctx, d, want)
}

// SetTaskRunChunkBytes makes TaskRun creations chunk their targets past n
// id bytes until the returned restore is called (taskruns.SetChunkBytes).
func SetTaskRunChunkBytes(n int) (restore func()) { return taskruns.SetChunkBytes(n) }

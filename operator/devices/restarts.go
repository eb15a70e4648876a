// The restarts a device's containers reports add up to, per Deployment:
// fleet_deployment_container_restarts_total, never by device.

package devices

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// restartDelta is how many restarts the containers of one Deployment
// gained between two consecutive reports of a device.
type restartDelta struct {
	workloadKey
	uid string
	n   int64
}

// restartDeltas compares a device's report cur with its previous one,
// prev: per Deployment of cur, the restarts its containers gained. A
// container of the same revision and name counts the growth of its count;
// a new container, a container of another revision or one whose count went
// down (it was replaced) counts its whole count. Deployments that gained
// nothing are left out. first is true for the first report seen of the
// device: it is the baseline and counts nothing (the counter does not
// count again what it counted before an operator restart).
func restartDeltas(prev, cur boundedContainers, first bool) []restartDelta {
	if first {
		return nil
	}
	before := make(map[workloadKey]*fleetv1.DeviceWorkload, len(prev.workloads))
	for i := range prev.workloads {
		w := &prev.workloads[i]
		before[workloadKey{w.Namespace, w.Deployment}] = w
	}
	var out []restartDelta
	for i, w := range cur.workloads {
		k := workloadKey{w.Namespace, w.Deployment}
		p := before[k]
		var n int64
		for _, c := range w.Containers {
			old := int32(-1)
			if p != nil && p.Revision == w.Revision {
				if j := slices.IndexFunc(p.Containers, func(x fleetv1.DeviceContainer) bool { return x.Name == c.Name }); j >= 0 {
					old = p.Containers[j].Restarts
				}
			}
			if old >= 0 && c.Restarts >= old {
				n += int64(c.Restarts - old)
			} else {
				n += int64(c.Restarts)
			}
		}
		if n > 0 {
			out = append(out, restartDelta{workloadKey: k, uid: cur.uids[i], n: n})
		}
	}
	return out
}

// countRestarts adds the restart deltas of a device's containers report to
// fleet_deployment_container_restarts_total, for the Deployments the device
// may run only: in the namespace of the Device that serves its id, existing
// with the UID the report names. So a device can neither make up series
// (Deployments) nor count for another namespace's.
func (r *Reconciler) countRestarts(ctx context.Context, device string, deltas []restartDelta) error {
	if len(deltas) == 0 || r.Metrics == nil {
		return nil
	}
	var list fleetv1.DeviceList
	if err := r.Client.List(ctx, &list, client.MatchingFields{IndexDeviceID: device}); err != nil {
		return fmt.Errorf("find Device %s: %w", device, err)
	}
	var owner *fleetv1.Device
	for i := range list.Items {
		if c := &list.Items[i]; owner == nil || older(c, owner) {
			owner = c
		}
	}
	if owner == nil {
		return nil
	}
	for _, d := range deltas {
		if d.ns != owner.Namespace {
			continue
		}
		var dep fleetv1.Deployment
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: d.ns, Name: d.name}, &dep)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("find Deployment %s/%s: %w", d.ns, d.name, err)
		}
		if string(dep.UID) == d.uid {
			r.Metrics.ContainerRestarts(d.ns, d.name, d.n)
		}
	}
	return nil
}

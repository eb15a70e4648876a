// Package devices owns the operator's Device role: the Device controller
// (Reconciler) that projects the devices' reports onto Device status and
// labels — liveness from heartbeats, inventory, the labels a device
// reports, its workloads and container restarts — decides which Device
// serves a device id, and keeps the fleet-identity key-value bucket in step
// with the Devices. Package operator wires it; it imports no other role.
package devices

import fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"

// Metrics is what the Device role records; the operator's *Metrics
// (fleet_devices, fleet_device_report_trimmed_total,
// fleet_container_restarts_total) implements it.
type Metrics interface {
	// ContainerRestarts adds n restarts of the containers of Deployment
	// namespace/deployment.
	ContainerRestarts(namespace, deployment string, n int64)
	// ReportTrimmed counts one device inventory cut at field.
	ReportTrimmed(field string)
	// LivenessChanged moves one device from liveness from ("": none) to to
	// ("": gone).
	LivenessChanged(from, to fleetv1.Liveness)
}

// noMetrics records nothing (a Reconciler without Metrics).
type noMetrics struct{}

func (noMetrics) ContainerRestarts(string, string, int64) {}
func (noMetrics) ReportTrimmed(string)                    {}
func (noMetrics) LivenessChanged(_, _ fleetv1.Liveness)   {}

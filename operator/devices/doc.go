// Package devices owns the operator's Device role: the Device controller
// (Reconciler) that projects the devices' reports onto Device status and
// labels — liveness from heartbeats, inventory, the labels a device
// reports, its workloads and container restarts — decides which Device
// serves a device id, and keeps the fleet-identity key-value bucket in step
// with the Devices. Its metrics (Metrics) count Devices by liveness, the
// inventories cut to a Device's bounds and the containers' restarts.
// Package operator wires it; it imports no other role.
package devices

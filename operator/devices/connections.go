package devices

import (
	"context"
	"time"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Connections is what the Device controller needs of the servers' view
// of the device connections (ADR 0032; presence.Tracker implements it).
type Connections interface {
	// Run follows the connections until ctx ends.
	Run(ctx context.Context) error
	// Connected reports whether device has a connection up, and since
	// when it has (up) or since when its last one is gone (not up); zero:
	// none seen.
	Connected(device string) (up bool, since time.Time)
}

// ConnectionChanged wakes the Devices named device: its first connection
// came up or its last one went. Connections calls it (presence.Options.
// Changed); before the controller runs on the leader it does nothing.
func (r *Reconciler) ConnectionChanged(device string) {
	p := r.connCtx.Load()
	if p == nil || r.wake == nil {
		return
	}
	if err := r.wakeDevice(*p, device, r.wake); err != nil {
		r.Log.WarnContext(*p, "connection change not applied", "device", device, "error", err)
	}
}

// connState is what Connections says of Device d (not tracked without
// one).
func (r *Reconciler) connState(d *fleetv1.Device) connState {
	if r.Connections == nil {
		return connState{}
	}
	up, since := r.Connections.Connected(d.Name)
	c := connState{tracked: true, up: up, since: since}
	if d.Status.LastHeartbeat != nil {
		c.recorded = d.Status.LastHeartbeat.Time
	}
	return c
}

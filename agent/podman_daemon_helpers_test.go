package agent_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/score"
)

// podmanDaemon is the agent daemon of w's device on w's Podman, fed by the
// fleet-intent bucket of an embedded JetStream, reporting into its streams.
type podmanDaemon struct {
	w  *podmanWorld
	st *events.Store
	// nc is a control-plane connection to the same server.
	nc *nats.Conn
}

// runDaemon runs agent.Run for w's device with opts (Device, Conn and
// Reconciler are set here) until the test ends; the test fails if it
// returns an error.
func (w *podmanWorld) runDaemon(t *testing.T, opts agent.Options) *podmanDaemon {
	t.Helper()
	srv, st := natstest.Provisioned(t)
	nc := natstest.Connect(t, srv, nats.CustomInboxPrefix("_INBOX_"+w.device))
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	opts.Device, opts.Conn, opts.Reconciler = w.device, nc, w.r
	go func() { done <- agent.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	})
	return &podmanDaemon{w: w, st: st, nc: natstest.Connect(t, srv)}
}

// put writes the device's fleet-intent value: generation gen of s.
func (d *podmanDaemon) put(gen int64, s score.Score) {
	t := d.w.t
	t.Helper()
	kv, err := d.st.JetStream().KeyValue(d.w.ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(events.DeviceIntent{Device: d.w.device, Deployments: []events.IntentEntry{d.w.entry(gen, s)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(d.w.ctx, d.w.device, b); err != nil {
		t.Fatal(err)
	}
}

// reports lists the device's workload reports of generation gen, in
// stream order (those read before an error, if one comes).
func (d *podmanDaemon) reports(gen int64) []events.WorkloadStatus {
	var out []events.WorkloadStatus
	for r, err := range d.st.Replay(d.w.ctx, "fleet.report."+d.w.device+".workload", events.FromStart()) {
		if err != nil {
			return out
		}
		if ws, err := events.Decode[events.WorkloadStatus](r.Event); err == nil && ws.Generation == gen {
			out = append(out, ws)
		}
	}
	return out
}

// reported reports whether the device reported generation gen in phase.
func (d *podmanDaemon) reported(gen int64, phase events.WorkloadPhase) bool {
	for _, ws := range d.reports(gen) {
		if ws.Phase == phase {
			return true
		}
	}
	return false
}

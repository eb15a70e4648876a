package agent_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// TestAnIntentRestoredWithALowerSequenceIsApplied: the streams restored
// from a backup (or started empty and written again) hold the device's
// intent at a lower stream sequence than the value the agent applied. On
// a server the agent was never connected to (ADR 0031) the agent reads
// its intent in full and, once the lower sequence is still what that
// server holds a confirmation delay later (a replica catching up answers
// an older value for a moment, ADR 0034), applies it: the device runs what
// the restored control plane asks, not a value that no longer exists.
// On a server it knew, a lower sequence is never applied (stream sequence
// decides which value is newer).
func TestAnIntentRestoredWithALowerSequenceIsApplied(t *testing.T) {
	w := newWorld(t)
	first := natstest.StartWith(t, natsembed.Options{StoreDir: t.TempDir(), Sync: natsembed.FastSync})
	u, _ := url.Parse(first.ClientURL())
	port, _ := strconv.Atoi(u.Port())
	admin := natstest.Connect(t, first, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	st, err := events.NewStore(admin, events.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	provision := func() {
		t.Helper()
		if err := events.Provision(w.ctx, st.JetStream(), events.ProvisionOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	put := func(gen int64) {
		t.Helper()
		kv, err := st.JetStream().KeyValue(w.ctx, events.BucketIntent)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := json.Marshal(events.DeviceIntent{Device: "d1", Deployments: []events.IntentEntry{entry(t, gen, baseScore())}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(w.ctx, "d1", raw); err != nil {
			t.Fatal(err)
		}
	}
	converged := func(gen int64) func() bool {
		return func() bool {
			for r, err := range st.Replay(w.ctx, "fleet.report.d1.workload", events.FromStart()) {
				if err != nil {
					return false
				}
				if ws, err := events.Decode[events.WorkloadStatus](r.Event); err == nil && ws.Generation == gen && ws.Phase == events.WorkloadConverged {
					return true
				}
			}
			return false
		}
	}
	provision()
	nc := natstest.Connect(t, first, nats.CustomInboxPrefix("_INBOX_d1"), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	o := agent.Options{Device: "d1", Conn: nc, Reconciler: w.r, HeartbeatInterval: time.Hour}
	agent.SetRebaseAfter(&o, 200*time.Millisecond)
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() { done <- agent.Run(ctx, o) }()
	defer func() { cancel(); <-done }()
	for gen := int64(1); gen <= 3; gen++ {
		put(gen)
	}
	testenv.Eventually(t, "generation 3 converged on the first server", 20*time.Second, converged(3))

	first.Shutdown()
	testenv.Eventually(t, "the agent to notice", 20*time.Second, func() bool { return !nc.IsConnected() })
	natstest.StartWith(t, natsembed.Options{StoreDir: t.TempDir(), Port: port, Sync: natsembed.FastSync})
	testenv.Eventually(t, "the admin to reconnect", 20*time.Second, admin.IsConnected)
	provision()
	put(2) // the restored intent: sequence 1, below the 3 the agent applied
	testenv.Eventually(t, "generation 2, restored at a lower sequence, converged", 20*time.Second, converged(2))
}

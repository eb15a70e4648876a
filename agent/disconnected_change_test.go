package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// gateDialer dials the server while open; cut closes the connection it
// made and refuses new ones until open: the device is offline in
// between, its server and streams unchanged.
type gateDialer struct {
	mu     sync.Mutex
	closed bool
	conn   net.Conn
}

func (g *gateDialer) Dial(network, address string) (net.Conn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, errors.New("gate closed: the device is offline")
	}
	c, err := net.DialTimeout(network, address, 5*time.Second)
	if err == nil {
		g.conn = c
	}
	return c, err
}

func (g *gateDialer) cut() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.conn != nil {
		_ = g.conn.Close()
	}
}

func (g *gateDialer) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = false
}

// TestAnIntentChangedWhileDisconnectedIsReadAfterTheReconnect: on the real
// auth chain (the callout, the provider, the embedded server), the agent
// is cut off its server; what the control plane does to its intent
// meanwhile, whose notification it never gets, is read after the
// reconnect (ADR 0034 keeps that read whole: nothing smaller tells the
// agent whether it missed a change), and an unchanged value costs that
// one read and no new report.
func TestAnIntentChangedWhileDisconnectedIsReadAfterTheReconnect(t *testing.T) {
	tests := []struct {
		name string
		// change is what the control plane does while the device is
		// offline; nil: nothing.
		change func(ctx context.Context, t *testing.T, env *callouttest.Env)
		// gen and phase are the workload report the agent must send
		// after the reconnect (zero: none).
		gen   int64
		phase events.WorkloadPhase
	}{
		{"a changed value is read and applied", func(ctx context.Context, t *testing.T, env *callouttest.Env) {
			putIntent(ctx, t, env, entry(t, 2, baseScore()))
		}, 2, events.WorkloadConverged},
		{"a deleted value removes the Deployment", func(ctx context.Context, t *testing.T, env *callouttest.Env) {
			if err := env.Intent.Delete(ctx, "d1"); err != nil {
				t.Fatal(err)
			}
		}, 1, events.WorkloadRemoved},
		{"a purged value removes the Deployment", func(ctx context.Context, t *testing.T, env *callouttest.Env) {
			if err := env.Intent.Purge(ctx, "d1"); err != nil {
				t.Fatal(err)
			}
		}, 1, events.WorkloadRemoved},
		{"an unchanged value is read once and reports nothing", nil, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := callouttest.Start(t)
			key, err := credential.ReadKeyFile(env.EnrollDevice(t, "d1"))
			if err != nil {
				t.Fatal(err)
			}
			w := newWorld(t)
			ctx := w.ctx
			gate := &gateDialer{}
			dc, err := agent.Connect(ctx, agent.ConnectOptions{URL: env.NATS.ClientURL(), Key: &key, Device: "d1",
				NATSOptions: []nats.Option{nats.SetCustomDialer(gate), nats.CustomReconnectDelay(func(int) time.Duration { return 20 * time.Millisecond })}})
			if err != nil {
				t.Fatal(err)
			}
			defer dc.Close()
			m := agent.NewMetrics(nil)
			reg := registry(t, m)
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				done <- agent.Run(rctx, agent.Options{Device: "d1", Conn: dc.Conn, Reconciler: w.r, HeartbeatInterval: time.Hour,
					ResyncInterval: time.Hour, Metrics: m})
			}()
			defer func() { cancel(); <-done }()
			putIntent(ctx, t, env, entry(t, 1, baseScore()))
			testenv.Eventually(t, "generation 1 converged", 20*time.Second, func() bool {
				return len(reports(ctx, t, env, 1, events.WorkloadConverged)) > 0
			})
			before := len(reports(ctx, t, env, 0, ""))
			reads := series(t, reg)[readsOK]

			gate.cut()
			testenv.Eventually(t, "the agent to be offline", 20*time.Second, func() bool { return !dc.Conn.IsConnected() })
			if tt.change != nil {
				tt.change(ctx, t, env)
			}
			gate.open()
			testenv.Eventually(t, "the agent to reconnect and read its intent", 20*time.Second, func() bool {
				return dc.Conn.IsConnected() && series(t, reg)[readsOK] > reads
			})
			if tt.gen == 0 {
				// The read after the reconnect is the pass's; nothing
				// else reads or reports.
				if err := dc.Conn.Flush(); err != nil {
					t.Fatal(err)
				}
				if got := series(t, reg)[readsOK] - reads; got != 1 {
					t.Errorf("%v intent reads after the reconnect, want 1", got)
				}
				// The last report may go again (it had not settled, ADR
				// 0031), as it was: no other phase or generation.
				for _, ws := range reports(ctx, t, env, 0, "")[before:] {
					if ws.Generation != 1 || ws.Phase != events.WorkloadConverged {
						t.Errorf("a %s report of generation %d after the reconnect, want none", ws.Phase, ws.Generation)
					}
				}
				return
			}
			testenv.Eventually(t, "the change made offline applied", 20*time.Second, func() bool {
				return len(reports(ctx, t, env, tt.gen, tt.phase)) > 0
			})
		})
	}
}

// putIntent writes the device d1's intent.
func putIntent(ctx context.Context, t *testing.T, env *callouttest.Env, entries ...events.IntentEntry) {
	t.Helper()
	raw, err := json.Marshal(events.DeviceIntent{Device: "d1", Deployments: entries})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Intent.Put(ctx, "d1", raw); err != nil {
		t.Fatal(err)
	}
}

// reports are d1's workload reports of generation gen in phase (gen 0:
// every report).
func reports(ctx context.Context, t *testing.T, env *callouttest.Env, gen int64, phase events.WorkloadPhase) []events.WorkloadStatus {
	t.Helper()
	var out []events.WorkloadStatus
	for r, err := range env.Store.Replay(ctx, "fleet.report.d1.workload", events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		ws, err := events.Decode[events.WorkloadStatus](r.Event)
		if err != nil {
			t.Fatal(err)
		}
		if gen == 0 || (ws.Generation == gen && ws.Phase == phase) {
			out = append(out, ws)
		}
	}
	return out
}

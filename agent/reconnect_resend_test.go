package agent_test

import (
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// TestAReconnectSendsAgainOnlyWhatMayHaveBeenLost: after a reconnect (a
// user JWT that expired, every 10 minutes in production) the agent sends
// again only the reports that may have been lost with the connection: the
// last report of a Deployment, the inventory and the container snapshot
// whose connection did not stay up for an echo window after them. An idle
// device whose reports settled long ago sends none of them again (issue
// #37: they were most of an idle device's reconnect traffic); one whose
// connection broke right after a report sends it again.
func TestAReconnectSendsAgainOnlyWhatMayHaveBeenLost(t *testing.T) {
	const echoWindow = 300 * time.Millisecond
	tests := []struct {
		name string
		// settle waits for the reports to settle before the reconnect.
		settle bool
		// want are the report kinds (and a workload report's generation)
		// the agent sends between the reconnect and the next revision,
		// sorted.
		want []string
	}{
		{"reports that settled before the reconnect are not sent again", true, nil},
		{"reports whose connection broke within their echo window are sent again", false, []string{"containers", "inventory", "workload 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := agent.NewMetrics(nil)
			reg := registry(t, m)
			e := startAgent(t, func(o *agent.Options) {
				o.Metrics, o.EchoWindow, o.RereportInterval = m, echoWindow, 50*time.Millisecond
			})
			admin := natstest.Connect(t, e.srv)
			sub, err := admin.SubscribeSync("fleet.report.d1.>")
			if err != nil {
				t.Fatal(err)
			}
			if err := admin.Flush(); err != nil {
				t.Fatal(err)
			}
			e.put(entry(t, 1, baseScore()))
			e.waitStatus(1, events.WorkloadConverged)
			if tt.settle {
				// The echo window of the last report, and a few echo ticks
				// after it, pass with the connection up.
				converged := time.Now()
				testenv.Eventually(t, "the reports to settle", 20*time.Second, func() bool {
					return time.Since(converged) > echoWindow+4*50*time.Millisecond
				})
			}
			// Everything sent before the reconnect is in sub's queue.
			if err := e.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			if err := admin.Flush(); err != nil {
				t.Fatal(err)
			}
			n, _, err := sub.Pending()
			if err != nil {
				t.Fatal(err)
			}
			for range n {
				if _, err := sub.NextMsg(time.Second); err != nil {
					t.Fatal(err)
				}
			}
			reads := series(t, reg)[readsOK]
			if err := e.nc.ForceReconnect(); err != nil {
				t.Fatal(err)
			}
			// The intent read the reconnect wakes comes after what the
			// reconnect sends.
			testenv.Eventually(t, "the intent read after the reconnect", 20*time.Second, func() bool {
				return series(t, reg)[readsOK] > reads
			})
			e.put(entry(t, 2, baseScore()))
			var got []string
			for {
				msg, err := sub.NextMsg(20 * time.Second)
				if err != nil {
					t.Fatalf("no report of generation 2 after the reconnect (got %v): %v", got, err)
				}
				kind := msg.Subject[strings.LastIndex(msg.Subject, ".")+1:]
				if kind == "heartbeat" {
					continue
				}
				if kind == "workload" {
					ev, err := events.DecodeStored(msg.Subject, msg.Data)
					if err != nil {
						t.Fatal(err)
					}
					ws, err := events.Decode[events.WorkloadStatus](ev)
					if err != nil {
						t.Fatal(err)
					}
					if ws.Generation == 2 {
						break
					}
					kind += " 1"
				}
				if !slices.Contains(got, kind) {
					got = append(got, kind) // echoes of one report count once
				}
			}
			slices.Sort(got)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("reports sent after the reconnect, before the next revision (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAReconnectToARestartedServerSendsEverythingAgain: a server the agent
// was never connected to (a restarted server has a new id; a full cluster
// restart or a restore from a backup gives every server one) may hold
// streams without the device's reports: the agent sends its settled
// reports again too, so the projections converge again without them.
func TestAReconnectToARestartedServerSendsEverythingAgain(t *testing.T) {
	const echoWindow = 300 * time.Millisecond
	w := newWorld(t)
	store := t.TempDir()
	srv := natstest.StartWith(t, natsembed.Options{StoreDir: store, Sync: natsembed.FastSync})
	u, _ := url.Parse(srv.ClientURL())
	port, _ := strconv.Atoi(u.Port())
	admin := natstest.Connect(t, srv, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	st, err := events.NewStore(admin, events.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Provision(w.ctx, st.JetStream(), events.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	kv, err := st.JetStream().KeyValue(w.ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, srv, nats.CustomInboxPrefix("_INBOX_d1"), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Options{Device: "d1", Conn: nc, Reconciler: w.r, HeartbeatInterval: time.Hour,
			EchoWindow: echoWindow, RereportInterval: 50 * time.Millisecond})
	}()
	defer func() { cancel(); <-done }()
	last := func(kind string) uint64 {
		rec, err := st.Last(w.ctx, "fleet.report.d1."+kind)
		if err != nil {
			return 0
		}
		return rec.Sequence
	}
	testenv.Eventually(t, "the first inventory", 20*time.Second, func() bool { return last("inventory") > 0 })
	raw, err := json.Marshal(events.DeviceIntent{Device: "d1", Deployments: []events.IntentEntry{entry(t, 1, baseScore())}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(w.ctx, "d1", raw); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the container snapshot of the revision", 20*time.Second, func() bool { return last("containers") > 0 })
	converged := time.Now()
	testenv.Eventually(t, "the reports to settle", 20*time.Second, func() bool {
		return time.Since(converged) > echoWindow+4*50*time.Millisecond
	})
	inventory, containers := last("inventory"), last("containers")
	before := srv.NATS().ID()
	srv.Shutdown()
	testenv.Eventually(t, "the agent to notice", 20*time.Second, func() bool { return !nc.IsConnected() })
	srv = natstest.StartWith(t, natsembed.Options{StoreDir: store, Port: port, Sync: natsembed.FastSync})
	if srv.NATS().ID() == before {
		t.Fatal("the restarted server has the id of the first")
	}
	testenv.Eventually(t, "the agent to reconnect", 20*time.Second, nc.IsConnected)
	testenv.Eventually(t, "the admin to reconnect", 20*time.Second, admin.IsConnected)
	testenv.Eventually(t, "the inventory and the container snapshot sent again", 20*time.Second, func() bool {
		return last("inventory") > inventory && last("containers") > containers
	})
}

package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// network plays the device's uplink: while it is down, every connection
// to the provider is refused and the NATS server's address accepts
// connections only to drop them.
type network struct {
	up atomic.Bool
}

// transport refuses every request while the network is down.
func (n *network) transport() http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		if !n.up.Load() {
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
		}
		return http.DefaultTransport.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// proxy forwards TCP connections to target while the network is up, and
// drops them at once while it is down. It returns its address.
func (n *network) proxy(t *testing.T, target string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !n.up.Load() {
				_ = c.Close()
				continue
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(s, c); _ = s.Close() }()
			go func() { defer wg.Done(); _, _ = io.Copy(c, s); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

// TestAnAgentThatBootsOfflineKeepsItsWorkloadsAndConvergesWhenTheNetworkReturns:
// after a reboot, with neither the provider nor NATS reachable, Connect
// still gives a connection (connecting), the agent runs, removes nothing,
// brings back the services the reboot left down and does not exit; when
// the network returns it reads discovery, gets its id_token
// through the callout, reads its intent and converges.
func TestAnAgentThatBootsOfflineKeepsItsWorkloadsAndConvergesWhenTheNetworkReturns(t *testing.T) {
	env := callouttest.Start(t)
	key, err := credential.ReadKeyFile(env.EnrollDevice(t, "d1"))
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t)
	w.r.Device = "d1"
	// What ran before the reboot: the Deployment's containers exist.
	e1 := entry(t, 1, baseScore())
	if err := w.r.Apply(w.ctx, e1); err != nil {
		t.Fatal(err)
	}
	before := w.containers()
	w.rt.Reboot() // the device restarts: every container is exited

	var nw network // down
	u, err := url.Parse(env.NATS.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	addr := nw.proxy(t, u.Host)
	dc, err := agent.Connect(w.ctx, agent.ConnectOptions{URL: "nats://" + addr, Key: &key, Device: "d1",
		HTTPClient:  &http.Client{Transport: nw.transport(), Timeout: 5 * time.Second},
		NATSOptions: []nats.Option{nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0)}})
	if err != nil {
		t.Fatalf("Connect offline: %v (an agent that boots without network must start anyway)", err)
	}
	defer dc.Close()
	if dc.Conn.IsConnected() {
		t.Fatal("connected through a network that is down")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Options{Device: "d1", Conn: dc.Conn, Reconciler: w.r, HeartbeatInterval: 50 * time.Millisecond})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	}()
	// Offline for a while: many reconnect attempts fail.
	testenv.Eventually(t, "reconnect attempts to fail", 20*time.Second, func() bool { return dc.Conn.Stats().Reconnects >= 5 })
	select {
	case err := <-done:
		t.Fatalf("the agent stopped while offline: %v", err)
	default:
	}
	// The services run again, the same containers, without the intent;
	// the completed init container is not rerun.
	testenv.Eventually(t, "the services to run again while offline", 20*time.Second, func() bool {
		cs := w.containers()
		return cs["api"].State == runtime.StateRunning && cs["worker"].State == runtime.StateRunning
	})
	for name, c := range w.containers() {
		if c.ID != before[name].ID {
			t.Errorf("container %s was replaced while offline", name)
		}
	}
	if c := w.containers()["migrate"]; c.State == runtime.StateRunning {
		t.Error("the init container was started without the intent")
	}

	// The control plane wants generation 2; the network returns.
	s2 := baseScore()
	s2.Data.Services[0].Image = "reg.example/api:v2"
	b, err := json.Marshal(events.DeviceIntent{Device: "d1", Deployments: []events.IntentEntry{entry(t, 2, s2)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Intent.Put(w.ctx, "d1", b); err != nil {
		t.Fatal(err)
	}
	nw.up.Store(true)
	testenv.Eventually(t, "the agent to converge on generation 2 once online", 30*time.Second, func() bool {
		rec, err := env.Store.Last(w.ctx, "fleet.report.d1.workload")
		if err != nil {
			return false
		}
		ws, err := events.Decode[events.WorkloadStatus](rec.Event)
		return err == nil && ws.Generation == 2 && ws.Phase == events.WorkloadConverged
	})
}

// TestADeviceConnectionReconnectsWithJitter: the agent's connection waits
// a jittered time between attempts, as docs/security.md requires (a fleet
// that lost its server together must not return in one instant).
func TestADeviceConnectionReconnectsWithJitter(t *testing.T) {
	env := callouttest.Start(t)
	key, err := credential.ReadKeyFile(env.EnrollDevice(t, "d1"))
	if err != nil {
		t.Fatal(err)
	}
	dc, err := agent.Connect(context.Background(), agent.ConnectOptions{URL: env.NATS.ClientURL(), Key: &key})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	o := dc.Conn.Opts
	if o.ReconnectJitter < time.Second || o.ReconnectJitterTLS < time.Second || o.ReconnectWait < time.Second || o.MaxReconnect >= 0 {
		t.Errorf("reconnect wait %s, jitter %s (TLS %s), max %d: want a wait and a jitter of seconds, forever",
			o.ReconnectWait, o.ReconnectJitter, o.ReconnectJitterTLS, o.MaxReconnect)
	}
	if !o.RetryOnFailedConnect || !o.IgnoreAuthErrorAbort {
		t.Error("a device connection must retry a failed first connect and keep retrying after refusals")
	}
	if err := dc.Conn.Flush(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("the device is not connected: %v", err)
	}
}

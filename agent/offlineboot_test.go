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
		NATSOptions: []nats.Option{nats.CustomReconnectDelay(func(int) time.Duration { return 20 * time.Millisecond })}})
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

// TestTheReconnectDelayIsJitteredAndBacksOff: the first reconnect attempt
// waits 2 to 7 s, and every failed attempt doubles the wait and the jitter
// up to a minute each, so a fleet that lost its server together neither
// returns in one instant nor keeps an overloaded callout overloaded.
func TestTheReconnectDelayIsJitteredAndBacksOff(t *testing.T) {
	bounds := []struct{ lo, hi time.Duration }{
		{2 * time.Second, 7 * time.Second}, {4 * time.Second, 14 * time.Second}, {8 * time.Second, 28 * time.Second},
		{16 * time.Second, 56 * time.Second}, {32 * time.Second, 92 * time.Second}, {time.Minute, 2 * time.Minute},
		{time.Minute, 2 * time.Minute}, {time.Minute, 2 * time.Minute},
	}
	for i, b := range bounds {
		attempt := i + 1
		lo, hi := time.Duration(1<<62), time.Duration(0)
		for range 2000 {
			d := agent.ReconnectDelay(attempt)
			lo, hi = min(lo, d), max(hi, d)
		}
		if lo < b.lo || hi > b.hi {
			t.Errorf("attempt %d waits %s to %s, want within %s to %s", attempt, lo, hi, b.lo, b.hi)
		}
		// Spread: 2,000 draws over the range land near both ends.
		if span := b.hi - b.lo; lo > b.lo+span/10 || hi < b.hi-span/10 {
			t.Errorf("attempt %d waits %s to %s: not spread over %s to %s", attempt, lo, hi, b.lo, b.hi)
		}
	}
	if d := agent.ReconnectDelay(1000); d < time.Minute || d > 2*time.Minute {
		t.Errorf("attempt 1000 waits %s, want 1 to 2 min", d)
	}
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
	if o.CustomReconnectDelayCB == nil || o.MaxReconnect >= 0 {
		t.Errorf("reconnect delay set %v, max %d: want agent.ReconnectDelay, forever", o.CustomReconnectDelayCB != nil, o.MaxReconnect)
	} else if d := o.CustomReconnectDelayCB(1); d < agent.DefaultReconnectWait || d > agent.DefaultReconnectWait+agent.DefaultReconnectJitter {
		t.Errorf("the first reconnect waits %s, want agent.ReconnectDelay's 2 to 7 s", d)
	}
	if !o.RetryOnFailedConnect || !o.IgnoreAuthErrorAbort {
		t.Error("a device connection must retry a failed first connect and keep retrying after refusals")
	}
	if err := dc.Conn.Flush(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("the device is not connected: %v", err)
	}
}

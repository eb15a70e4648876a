package agent_test

import (
	"context"
	"errors"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// agentGoroutines counts the goroutines labelled test=label (inherited
// from the goroutine that runs agent.Run) that run code of package agent:
// the daemon's own, not the NATS client's, and none of another test's.
func agentGoroutines(t *testing.T, label string) int {
	var b strings.Builder
	if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
		t.Fatal(err)
	}
	count := 0
	for g := range strings.SplitSeq(b.String(), "\n\n") {
		if !strings.Contains(g, `"test":"`+label+`"`) || !strings.Contains(g, "github.com/nationtech/harmony-fleet/agent.") {
			continue
		}
		// A group: "<count> @ <pcs>" then its labels and frames.
		n, err := strconv.Atoi(strings.Fields(g)[0])
		if err != nil {
			t.Fatalf("goroutine profile group %q: %v", g, err)
		}
		count += n
	}
	return count
}

// TestADeviceConnectionBuffersAtMostTheReconnectBufferWhileDisconnected:
// while its connection is down, what the device publishes (log chunks, a
// report racing the disconnect; the agent holds its reports itself) is
// kept by the NATS client for the reconnect, up to agent.ReconnectBuffer
// bytes, then refused: a small device does not grow by the client's
// default 8 MiB.
func TestADeviceConnectionBuffersAtMostTheReconnectBufferWhileDisconnected(t *testing.T) {
	env := callouttest.Start(t)
	key, err := credential.ReadKeyFile(env.EnrollDevice(t, "d1"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dc, err := agent.Connect(ctx, agent.ConnectOptions{URL: env.NATS.ClientURL(), Key: &key, Device: "d1",
		// Stay disconnected for the test once the server closed the connection.
		NATSOptions: []nats.Option{nats.CustomReconnectDelay(func(int) time.Duration { return time.Hour })}})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	testenv.Eventually(t, "the device to connect", 20*time.Second, dc.Conn.IsConnected)
	srv := env.NATS.NATS()
	connz, err := srv.Connz(&server.ConnzOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kicked := false
	for _, c := range connz.Conns {
		if c.Name == "fleet-agent d1" {
			if err := srv.DisconnectClientByID(c.Cid); err != nil {
				t.Fatal(err)
			}
			kicked = true
		}
	}
	if !kicked {
		t.Fatal("the device's connection is not on the server")
	}
	testenv.Eventually(t, "the device to be disconnected", 20*time.Second, func() bool { return dc.Conn.Status() == nats.RECONNECTING })

	chunk := make([]byte, 64<<10)
	accepted := 0
	for accepted < 16<<20 {
		err := dc.Conn.Publish("fleet.logs.d1.r1.q1", chunk)
		if errors.Is(err, nats.ErrReconnectBufExceeded) {
			break
		}
		if err != nil {
			t.Fatalf("publish while disconnected: %v", err)
		}
		accepted += len(chunk)
	}
	if accepted > agent.ReconnectBuffer {
		t.Errorf("the client buffered %d bytes while disconnected, want at most agent.ReconnectBuffer (%d)", accepted, agent.ReconnectBuffer)
	}
	if accepted < agent.ReconnectBuffer-2*len(chunk) {
		t.Errorf("the client buffered only %d bytes while disconnected, want about agent.ReconnectBuffer (%d)", accepted, agent.ReconnectBuffer)
	}
}

// TestAnIdleAgentRunsFiveGoroutinesOfItsOwn: once converged and idle, the
// daemon runs its loop, the task runner, the prefetcher, the container
// monitor and the maintenance-window watch, nothing else: every goroutine
// is a stack kept per device (the NATS client adds its own).
func TestAnIdleAgentRunsFiveGoroutinesOfItsOwn(t *testing.T) {
	env := callouttest.Start(t)
	key, err := credential.ReadKeyFile(env.EnrollDevice(t, "d1"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dc, err := agent.Connect(ctx, agent.ConnectOptions{URL: env.NATS.ClientURL(), Key: &key, Device: "d1"})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	inventory, err := env.Admin.SubscribeSync("fleet.report.d1.inventory")
	if err != nil {
		t.Fatal(err)
	}
	// The server holds the subscription before the agent may report.
	if err := env.Admin.Flush(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		// Every goroutine the agent starts inherits the label.
		pprof.Do(ctx, pprof.Labels("test", t.Name()), func(ctx context.Context) {
			done <- agent.Run(ctx, agent.Options{Device: "d1", Conn: dc.Conn,
				Reconciler: &agent.Reconciler{Runtime: sim.New(sim.Options{})}})
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	}()
	if _, err := inventory.NextMsg(20 * time.Second); err != nil {
		t.Fatalf("the agent reported no inventory: %v", err)
	}
	// A pass may still be finishing: poll until the agent is idle.
	const want = 5
	got := 0
	_ = testenv.Poll(ctx, 10*time.Second, func() bool {
		got = agentGoroutines(t, t.Name())
		return got <= want
	})
	if got != want {
		t.Errorf("the idle agent runs %d goroutines of its own, want %d", got, want)
	}
}

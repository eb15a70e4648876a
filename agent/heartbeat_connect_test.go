package agent_test

import (
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// TestAHeartbeatOnEveryConnect: liveness is the connection (ADR 0032),
// and the heartbeat (the agent's version and uptime) goes on every
// connect, also with heartbeats on connect only (a negative interval,
// --heartbeat 0).
func TestAHeartbeatOnEveryConnect(t *testing.T) {
	for _, tc := range []struct {
		name     string
		interval time.Duration
	}{
		{"with heartbeats every hour", time.Hour},
		{"with heartbeats on connect only", -1},
	} {
		t.Run(tc.name, func(t *testing.T) { heartbeatsOnConnect(t, tc.interval) })
	}
}

func heartbeatsOnConnect(t *testing.T, interval time.Duration) {
	e := startAgent(t, func(o *agent.Options) { o.HeartbeatInterval = interval })
	admin := natstest.Connect(t, e.srv)
	sub, err := admin.SubscribeSync("fleet.report.d1.heartbeat")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	// The start's heartbeat may have gone before the subscription: the
	// reconnects are what is counted.
	for i := range 2 {
		if err := e.nc.ForceReconnect(); err != nil {
			t.Fatal(err)
		}
		if _, err := sub.NextMsg(30 * time.Second); err != nil {
			t.Fatalf("no heartbeat after reconnect %d: %v", i+1, err)
		}
	}
}

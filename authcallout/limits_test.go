package authcallout_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
)

// TestWhatOneDeviceCanCostIsBounded checks the bounds docs/security.md
// states ("What one device can cost") against the running server.
func TestWhatOneDeviceCanCostIsBounded(t *testing.T) {
	e := newEnv(t, envOptions{})
	src := e.device(t, "dev-a", false)
	report, _ := events.ReportSubject("dev-a", events.ReportInventory)

	t.Run("a message up to the payload limit is accepted", func(t *testing.T) {
		c, err := e.connect("dev-a", src, "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Publish(report, bytes.Repeat([]byte("x"), authcallout.DeviceMaxPayload)); err != nil {
			t.Fatalf("a %d-byte report: %v", authcallout.DeviceMaxPayload, err)
		}
		c.noViolation(t)
		if !c.IsConnected() {
			t.Fatalf("the connection closed after a %d-byte report: %v", authcallout.DeviceMaxPayload, c.LastError())
		}
	})
	t.Run("a message over the payload limit closes the connection", func(t *testing.T) {
		// The INFO a client gets before it authenticates names the server's
		// limit; the account's is enforced on every message after.
		closed := make(chan struct{})
		c, err := e.connect("dev-a", src, "", nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.Publish(report, bytes.Repeat([]byte("x"), authcallout.DeviceMaxPayload+1))
		_ = c.Flush()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatalf("the connection is still open 10s after a %d-byte report", authcallout.DeviceMaxPayload+1)
		}
		if err := c.LastError(); err == nil || !strings.Contains(strings.ToLower(err.Error()), "maximum payload") {
			t.Errorf("last error %v, want the server's maximum payload violation", err)
		}
	})
	t.Run("subscriptions beyond the limit are refused", func(t *testing.T) {
		c, err := e.connect("dev-a", src, "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		inbox := authcallout.InboxPrefix("dev-a")
		for i := range authcallout.DeviceMaxSubs + 1 {
			if _, err := c.SubscribeSync(inbox + ".s" + string(rune('a'+i))); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.FlushTimeout(5 * time.Second); err != nil && !strings.Contains(strings.ToLower(err.Error()), "maximum subscriptions") {
			t.Fatal(err)
		}
		deadline := time.After(10 * time.Second)
		for {
			select {
			case err := <-c.errs:
				if strings.Contains(strings.ToLower(err.Error()), "maximum subscriptions exceeded") {
					return
				}
			case <-deadline:
				if c.LastError() != nil && strings.Contains(strings.ToLower(c.LastError().Error()), "maximum subscriptions exceeded") {
					return
				}
				t.Fatalf("no 'maximum subscriptions exceeded' for subscription %d within 10s (last error %v)", authcallout.DeviceMaxSubs+1, c.LastError())
			}
		}
	})
	t.Run("an id_token larger than the control line limit is refused before the callout", func(t *testing.T) {
		huge := strings.Repeat("a", 9*1024)
		c, err := e.connect("dev-a", nil, huge)
		if err == nil {
			c.Close()
			t.Fatal("a 9 KiB token connected")
		}
		if !strings.Contains(strings.ToLower(err.Error()), "maximum control line") {
			t.Errorf("connect with a 9 KiB token: %v, want the server's maximum control line error", err)
		}
	})
}

// TestTheDeviceLimitsInTheConfigurationAreTheDocumentedOnes keeps the
// DEVICES account's limits in ServerConfig equal to the constants.
func TestTheDeviceLimitsInTheConfigurationAreTheDocumentedOnes(t *testing.T) {
	want := fmt.Sprintf("limits: { max_payload: %d, max_subscriptions: %d }", authcallout.DeviceMaxPayload, authcallout.DeviceMaxSubs)
	if !strings.Contains(authcallout.ServerConfig, want) {
		t.Errorf("ServerConfig lacks %q", want)
	}
}

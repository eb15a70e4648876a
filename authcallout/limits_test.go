package authcallout_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
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
		// A hostile device does not check the limit itself: speak the
		// protocol on a plain socket, as it could, so that only the server
		// decides.
		raw, err := net.DialTimeout("tcp", strings.TrimPrefix(e.ns.ClientURL(), "nats://"), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		_ = raw.SetDeadline(time.Now().Add(15 * time.Second))
		r := bufio.NewReader(raw)
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "INFO ") {
			t.Fatalf("the server's first line: %q, %v", line, err)
		}
		connect, _ := json.Marshal(map[string]any{"auth_token": src.TokenHandler(0)(), "verbose": false, "pedantic": false,
			"headers": true, "protocol": 1, "name": "dev-a"})
		fmt.Fprintf(raw, "CONNECT %s\r\nPING\r\n", connect)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("no PONG after CONNECT: %v", err)
			}
			if strings.HasPrefix(line, "-ERR") {
				t.Fatalf("CONNECT refused: %s", line)
			}
			if strings.HasPrefix(line, "PONG") {
				break
			}
		}
		payload := bytes.Repeat([]byte("x"), authcallout.DeviceMaxPayload+1)
		fmt.Fprintf(raw, "PUB %s %d\r\n%s\r\n", report, len(payload), payload)
		var got []string
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				got = append(got, strings.TrimSpace(line))
			}
			if err != nil {
				break // the server closed the connection
			}
		}
		if !slices.ContainsFunc(got, func(l string) bool { return strings.Contains(strings.ToLower(l), "maximum payload") }) {
			t.Errorf("the server's answer to a %d-byte report before it closed: %q, want a maximum payload violation",
				authcallout.DeviceMaxPayload+1, got)
		}
	})
	t.Run("a client is told the account's payload limit", func(t *testing.T) {
		c, err := e.connect("dev-a", src, "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		testenv.EventuallyErr(t, "the client to learn the account's payload limit", 10*time.Second, func() error {
			got := c.MaxPayload()
			if got == authcallout.DeviceMaxPayload {
				return nil
			}
			if err := c.FlushTimeout(time.Second); err != nil {
				t.Fatal(err)
			}
			return fmt.Errorf("the client's limit is %d bytes, want the account's %d", got, authcallout.DeviceMaxPayload)
		})
		if err := c.Publish(report, bytes.Repeat([]byte("x"), authcallout.DeviceMaxPayload+1)); !errors.Is(err, nats.ErrMaxPayload) {
			t.Errorf("a %d-byte publish: %v, want %v", authcallout.DeviceMaxPayload+1, err, nats.ErrMaxPayload)
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

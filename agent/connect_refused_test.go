package agent_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// jsonRecords parses every line of logs as a JSON log record; a line that
// is not one fails the test.
func jsonRecords(t *testing.T, logs string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(logs), "\n") {
		if l == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("a log line is not a JSON record (%v): %s", err, l)
		}
		out = append(out, r)
	}
	return out
}

// refusals counts the records whose err says NATS refused the connect.
func refusals(recs []map[string]any) int {
	n := 0
	for _, r := range recs {
		if e, _ := r["err"].(string); strings.Contains(e, "authorization violation") {
			n++
		}
	}
	return n
}

// TestARefusedDeviceLogsWhyAsJSONAndRetriesWithAFreshIDToken: when the
// auth callout refuses a device's cached id_token (here: the provider's
// signing key changed, as when a development provider restarts), the
// agent logs the refusal as a structured record naming the fix, drops the
// token, and its next attempt presents a new grant's id_token and gets in.
// When the grant itself is refused (the machine user is gone), every
// attempt is logged as a structured record and retried.
func TestARefusedDeviceLogsWhyAsJSONAndRetriesWithAFreshIDToken(t *testing.T) {
	env := callouttest.StartWith(t, callouttest.Options{MinKeyRefresh: 10 * time.Millisecond})
	key, err := credential.ReadKeyFile(env.EnrollDevice(t, "d1"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.SyncBuffer{}
	dc, err := agent.Connect(context.Background(), agent.ConnectOptions{URL: env.NATS.ClientURL(), Key: &key, Device: "d1",
		Logger:      slog.New(slog.NewJSONHandler(logs, nil)),
		NATSOptions: []nats.Option{nats.CustomReconnectDelay(func(int) time.Duration { return 50 * time.Millisecond })}})
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if err := testenv.Poll(context.Background(), time.Minute, dc.Conn.IsConnected); err != nil {
		t.Fatalf("the device never connected: %v\n%s", err, logs.String())
	}

	// The provider forgets the key that signed the cached id_token, and
	// the callout learns it.
	if _, err := env.Provider.RotateSigningKey(nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := env.Verifier.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := dc.Conn.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Poll(context.Background(), 2*time.Minute, func() bool {
		return dc.Conn.IsConnected() && refusals(jsonRecords(t, logs.String())) > 0
	}); err != nil {
		t.Fatalf("after its id_token was refused the device did not log the refusal and reconnect with a new one (connected %v, %v):\n%s",
			dc.Conn.IsConnected(), err, logs.String())
	}
	recs := jsonRecords(t, logs.String())
	var fix bool
	for _, r := range recs {
		if f, _ := r["fix"].(string); strings.Contains(f, "enrolled") && r["device"] == "d1" {
			fix = true
		}
	}
	if !fix {
		t.Errorf("no refusal record names the device and the fix:\n%s", logs.String())
	}

	// The machine user is gone: the grant is refused, every attempt.
	if err := env.Provider.RemoveMachineUser(context.Background(), key.UserID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Provider.RotateSigningKey(nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := env.Verifier.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := refusals(recs)
	if err := dc.Conn.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Poll(context.Background(), 2*time.Minute, func() bool {
		return refusals(jsonRecords(t, logs.String())) >= before+2
	}); err != nil {
		t.Fatalf("a device whose grant is refused did not log each refused attempt as JSON and retry (%v):\n%s", err, logs.String())
	}
	var grant bool
	for _, r := range jsonRecords(t, logs.String()) {
		if e, _ := r["err"].(string); strings.Contains(e, "grant") {
			grant = true
		}
	}
	if !grant {
		t.Errorf("no record says the grant was refused:\n%s", logs.String())
	}
}

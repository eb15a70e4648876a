package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

func TestTheBinaryConvergesASimulatedDevice(t *testing.T) {
	srv, st := natstest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	// The simulated runtime has no images: the score names one the
	// simulated registry cannot serve, so the device reports a failure
	// naming it. That proves the whole chain: flags, connection, intent,
	// reconcile, report.
	score := json.RawMessage(`{"type":"PodmanV0","data":{"services":[{"name":"api","image":"reg.example/api:v1"}]}}`)
	val, _ := json.Marshal(events.DeviceIntent{Device: "rpi-9", Deployments: []events.IntentEntry{{Namespace: "lab", Name: "api", UID: "u", Generation: 1, Score: score}}})
	if _, err := kv.Put(ctx, "rpi-9", val); err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var logs testenv.SyncBuffer
	go func() {
		done <- run(runCtx, []string{"--device", "rpi-9", "--nats-url", srv.ClientURL(), "--insecure-no-auth", "--runtime", "sim", "--label", "role=analyzer"}, &logs)
	}()
	var ws events.WorkloadStatus
	if testenv.Poll(context.Background(), 30*time.Second, func() bool {
		rec, err := st.Last(ctx, "fleet.report.rpi-9.workload")
		if err != nil {
			return false
		}
		ws, _ = events.Decode[events.WorkloadStatus](rec.Event)
		return ws.Phase == events.WorkloadFailed
	}) != nil {
		t.Fatalf("no failed report; logs:\n%s", logs.String())
	}
	if !strings.Contains(ws.Error, "reg.example/api:v1") {
		t.Errorf("error %q does not name the image", ws.Error)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestFlagErrorsNameTheFix(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"without a key file the agent refuses to connect", []string{"--device", "d"}, "--key-file"},
		{"without a key file or a device id the agent names the flag", []string{}, "--device"},
		{"a key file that cannot be read is named", []string{"--device", "d", "--key-file", "missing-key.json"}, "missing-key.json"},
		{"an unknown runtime is refused", []string{"--device", "d", "--insecure-no-auth", "--runtime", "docker"}, "--runtime"},
		{"a label without a value is refused", []string{"--label", "role"}, "key=value"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), tc.args, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// TestADeviceConnectsWithOnlyItsKeyFileAndTheNATSURL runs the binary's main
// path through the production authentication chain: machine key → id_token
// from the OpenID Provider → NATS auth callout → device-scoped permissions.
// The agent reads its intent by direct get and reports; nothing else is
// configured.
func TestADeviceConnectsWithOnlyItsKeyFileAndTheNATSURL(t *testing.T) {
	env := callouttest.Start(t)
	keyFile := env.EnrollDevice(t, "rpi-7")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	score := json.RawMessage(`{"type":"PodmanV0","data":{"services":[{"name":"api","image":"reg.example/api:v1"}]}}`)
	val, _ := json.Marshal(events.DeviceIntent{Device: "rpi-7", Deployments: []events.IntentEntry{{Namespace: "lab", Name: "api", UID: "u", Generation: 1, Score: score}}})
	if _, err := env.Intent.Put(ctx, "rpi-7", val); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var logs testenv.SyncBuffer
	go func() {
		done <- run(runCtx, []string{"--nats-url", env.NATS.ClientURL(), "--key-file", keyFile, "--runtime", "sim"}, &logs)
	}()
	// Poll calls cond on this goroutine, so cond may fail the test.
	if testenv.Poll(context.Background(), 30*time.Second, func() bool {
		rec, err := env.Store.Last(ctx, "fleet.report.rpi-7.workload")
		if err == nil {
			if ws, _ := events.Decode[events.WorkloadStatus](rec.Event); ws.Phase == events.WorkloadFailed {
				return true // the intent was read (direct get) and the report published
			}
		}
		select {
		case err := <-done:
			t.Fatalf("the agent stopped: %v\nlogs:\n%s", err, logs.String())
		default:
		}
		return false
	}) != nil {
		t.Fatalf("no workload report through the callout; logs:\n%s", logs.String())
	}
	if _, err := env.Store.Last(ctx, "fleet.report.rpi-7.inventory"); err != nil {
		t.Errorf("inventory: %v", err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), `"key"`) {
		t.Error("the logs mention the key")
	}
}

func TestOpenBaoFlagErrorsNameTheFix(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"OpenBao without a device prefix is refused", []string{"--device", "d", "--insecure-no-auth", "--openbao-url", "http://127.0.0.1:8200"}, "--openbao-device-prefix"},
		{"OpenBao without a role is refused", []string{"--device", "d", "--insecure-no-auth", "--openbao-url", "http://127.0.0.1:8200", "--openbao-device-prefix", "fleet/lab"}, "--openbao-role"},
		{"OpenBao without a machine key is refused", []string{"--device", "d", "--insecure-no-auth", "--runtime", "sim", "--openbao-url", "http://127.0.0.1:8200", "--openbao-device-prefix", "fleet/lab", "--openbao-role", "fleet-device-lab"}, "--key-file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), tc.args, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

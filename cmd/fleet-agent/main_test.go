package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/dev/baostandin"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/score"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
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
		{"a Podman socket that does not answer names the flag and how to start the socket",
			[]string{"--device", "d", "--insecure-no-auth", "--podman-socket", "unix:///nonexistent-fleet-test/podman.sock"},
			"--podman-socket unix:///nonexistent-fleet-test/podman.sock: "},
		{"a Podman socket that does not answer says how to start the socket", []string{"--device", "d", "--insecure-no-auth", "--podman-socket", "unix:///nonexistent-fleet-test/podman.sock"},
			"systemctl --user enable --now podman.socket"},
		{"no fetch-ahead pulls at once is refused with the range", []string{"--device", "d", "--insecure-no-auth", "--runtime", "sim", "--fetch-concurrency", "0"},
			"--fetch-concurrency 0: give 1 to 16"},
		{"negative fetch-ahead pulls are refused", []string{"--device", "d", "--insecure-no-auth", "--runtime", "sim", "--fetch-concurrency", "-2"},
			"--fetch-concurrency -2: give 1 to 16"},
		{"more fetch-ahead pulls than the bound are refused", []string{"--device", "d", "--insecure-no-auth", "--runtime", "sim", "--fetch-concurrency", "17"},
			"--fetch-concurrency 17: give 1 to 16"},
		{"a socket path left without $XDG_RUNTIME_DIR says that it was empty", []string{"--device", "d", "--insecure-no-auth", "--podman-socket", "unix:///podman/podman.sock"},
			"$XDG_RUNTIME_DIR was empty"},
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
	// Reports are core publishes each stream stores on its own: the
	// inventory, sent first, is polled for too.
	if err := testenv.PollErr(ctx, 30*time.Second, func() error {
		_, err := env.Store.Last(ctx, "fleet.report.rpi-7.inventory")
		return err
	}); err != nil {
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

// TestTheBinaryServesItsMetrics runs the binary with --metrics-addr through
// the production chain (machine key → id_token → auth callout; id_token →
// OpenBao, the stand-in) on the simulated runtime, and scrapes /metrics
// over HTTP: the connection, a pass, a failed pull and a secret reference
// OpenBao refused are there, beside the Go and process families, and no
// secret value, reference or variable name is.
func TestTheBinaryServesItsMetrics(t *testing.T) {
	env := callouttest.Start(t)
	device := "met-1"
	keyFile := env.EnrollDevice(t, device)
	kf, err := credential.ReadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bao := baostandin.Start(t)
	admin, err := openbao.NewWithToken(openbao.Config{Address: bao.URL()}, bao.RootToken())
	if err != nil {
		t.Fatal(err)
	}
	appSecret := "app-secret-" + randomHex(t)
	if err := errors.Join(
		admin.ConfigureJWT(ctx, env.Provider.Issuer(), ""),
		admin.PutPolicy(ctx, "fleet-device-"+device, `path "secret/data/apps/demo/db" { capabilities = ["read"] }`),
		admin.PutJWTRole(ctx, "fleet-device", openbao.JWTRole{BoundAudiences: []string{env.Provider.Audience()}, BoundSubject: kf.UserID, Policies: []string{"fleet-device-" + device}, TTL: time.Hour}),
		admin.Write(ctx, "apps/demo/db", map[string]any{"password": appSecret}),
	); err != nil {
		t.Fatal(err)
	}
	// The simulated engine has no images: both Deployments fail, "resolved"
	// on its pull after its secret was resolved, "missing-key" on the
	// secret reference OpenBao cannot resolve.
	scores := map[string]score.Score{
		"resolved": {Type: "PodmanV0", Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: "reg.example/api:v1",
			SecretEnv: []score.SecretEnv{{Name: "DB_PASSWORD", Secret: "apps/demo/db", Key: "password"}}}}}},
		"missing-key": {Type: "PodmanV0", Data: score.PodmanV0{Services: []score.Service{{Name: "mk", Image: "reg.example/mk:v1",
			SecretEnv: []score.SecretEnv{{Name: "API_TOKEN", Secret: "apps/demo/db", Key: "no-such-key"}}}}}},
	}
	di := events.DeviceIntent{Device: device}
	for n, s := range scores {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		di.Deployments = append(di.Deployments, events.IntentEntry{Namespace: "lab", Name: n, UID: "u-" + n, Generation: 1, RevisionID: "r1", Score: raw})
	}
	val, _ := json.Marshal(di)
	if _, err := env.Intent.Put(ctx, device, val); err != nil {
		t.Fatal(err)
	}

	args := []string{"--nats-url", env.NATS.ClientURL(), "--key-file", keyFile, "--runtime", "sim",
		"--openbao-url", bao.URL(), "--openbao-device-prefix", "fleet/lab", "--openbao-role", "fleet-device"}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var logs testenv.SyncBuffer
	go func() { done <- run(runCtx, append(args, "--metrics-addr", "127.0.0.1:0"), &logs) }()

	// The bound address is logged.
	var addr string
	if testenv.Poll(context.Background(), 30*time.Second, func() bool {
		for line := range strings.Lines(logs.String()) {
			var l struct{ Msg, Addr, Path string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "serving metrics" && l.Path == "/metrics" {
				addr = l.Addr
				return true
			}
		}
		select {
		case err := <-done:
			t.Fatalf("the agent stopped: %v\nlogs:\n%s", err, logs.String())
		default:
		}
		return false
	}) != nil {
		t.Fatalf("the metrics address was not logged; logs:\n%s", logs.String())
	}

	want := map[string]float64{
		"fleet_agent_connected":                                       1,
		"fleet_agent_secret_errors_total":                             1,
		`fleet_agent_image_pulls_total{result="error"}`:               1,
		`fleet_agent_runtime_errors_total{op="pull"}`:                 1,
		`fleet_agent_pass_duration_seconds_count{result="failed"}`:    1,
		`fleet_agent_intent_reads_total{result="ok"}`:                 1,
		"fleet_agent_report_buffer_depth":                             0,
		`fleet_agent_pass_duration_seconds_count{result="converged"}`: 0,
	}
	var body string
	var got map[string]float64
	if testenv.Poll(context.Background(), 30*time.Second, func() bool {
		body, err = scrape("http://" + addr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		got = samples(body)
		for k, v := range want {
			if g, ok := got[k]; !ok || (v == 0) != (g == 0) {
				return false
			}
		}
		return true
	}) != nil {
		t.Fatalf("scraped %v, want (zero or not) %v\nbody:\n%s", got, want, body)
	}
	for _, f := range []string{"go_goroutines", "process_start_time_seconds"} {
		if _, ok := got[f]; !ok {
			t.Errorf("the scrape has no %s", f)
		}
	}
	for _, secret := range []string{appSecret, "apps/demo/db", "DB_PASSWORD", "API_TOKEN", "no-such-key"} {
		if strings.Contains(body, secret) {
			t.Errorf("the scrape holds %q", secret)
		}
	}

	t.Run("an address already taken is refused naming the flag", func(t *testing.T) {
		err := run(ctx, append(args, "--metrics-addr", addr), &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "--metrics-addr") {
			t.Errorf("got %v, want an error naming --metrics-addr", err)
		}
	})

	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := scrape("http://" + addr + "/metrics"); err == nil {
		t.Error("the metrics server still answers after the agent stopped")
	}
}

// scrape GETs url and returns the body of a 200 answer.
func scrape(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// samples reads the text exposition format: the value of every sample by
// name{labels} as written.
func samples(body string) map[string]float64 {
	out := map[string]float64{}
	for line := range strings.Lines(body) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

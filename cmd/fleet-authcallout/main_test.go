package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// binary is the command's run with a configuration file, against the
// documented NATS configuration and a development provider, and an
// operator connection through it that provisioned the Fleet streams.
type binary struct {
	ns      *natsembed.Server
	op      *devop.Provider
	logs    *testenv.SyncBuffer
	admin   *nats.Conn
	idkv    jetstream.KeyValue
	secrets []string // passwords and seeds
	cancel  context.CancelFunc
	runErr  chan error
}

// startBinary runs the command with -config and args until the test ends.
func startBinary(t *testing.T, args ...string) *binary {
	t.Helper()
	doc, err := os.ReadFile("../../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```conf\n(# fleet-authcallout: NATS server configuration\n.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("no NATS configuration block in docs/security.md")
	}
	issuer, _ := nkeys.CreateAccount()
	issuerPub, _ := issuer.PublicKey()
	issuerSeed, _ := issuer.Seed()
	xkey, _ := nkeys.CreateCurveKeys()
	xpub, _ := xkey.PublicKey()
	xseed, _ := xkey.Seed()
	t.Setenv("FLEET_CALLOUT_PASSWORD", "pw-callout")
	t.Setenv("FLEET_READER_PASSWORD", "pw-reader")
	t.Setenv("FLEET_CALLOUT_SYS_PASSWORD", "pw-sys")
	t.Setenv("FLEET_PRESENCE_PASSWORD", "pw-presence")
	t.Setenv("FLEET_CALLOUT_ISSUER", issuerPub)
	t.Setenv("FLEET_CALLOUT_XKEY", xpub)
	b := &binary{logs: &testenv.SyncBuffer{}, runErr: make(chan error, 1),
		secrets: []string{"pw-callout", "pw-reader", "pw-sys", string(issuerSeed), string(xseed)}}
	b.ns = natstest.StartWith(t, natsembed.Options{Config: string(m[1]), Sync: natsembed.FastSync})

	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	if b.op, err = devop.New(devop.Options{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	wg.Go(func() { _ = b.op.Run(ctx) })

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := authcallout.Config{
		NATSURL: b.ns.ClientURL(), CalloutUser: "fleet-authcallout", CalloutPasswordFile: write("callout.pw", "pw-callout\n"),
		ReaderUser: "fleet-identity-reader", ReaderPasswordFile: write("reader.pw", "pw-reader"),
		SystemUser: "fleet-authcallout-sys", SystemPasswordFile: write("sys.pw", "pw-sys"),
		IssuerSeedFile: write("issuer.seed", string(issuerSeed)), XKeySeedFile: write("x.seed", string(xseed)),
		OIDCIssuer: b.op.Issuer(), Audience: b.op.Audience(), LogFormat: "text", LogLevel: "debug",
	}
	raw, _ := json.Marshal(cfg)
	cfgPath := write("callout.json", string(raw))
	wg.Go(func() { b.runErr <- run(ctx, append([]string{"-config", cfgPath}, args...), b.logs) })

	opSrc := b.source(t, "operator", authcallout.RoleOperator)
	if err := testenv.PollErr(ctx, 30*time.Second, func() error {
		b.admin, err = nats.Connect(b.ns.ClientURL(), nats.TokenHandler(opSrc.TokenHandler(0)), nats.CustomInboxPrefix(authcallout.InboxPrefix(opSrc.Subject())))
		select {
		case err := <-b.runErr:
			t.Fatalf("run returned early: %v\nlogs:\n%s", err, b.logs.String())
		default:
		}
		return err
	}); err != nil {
		t.Fatalf("operator connect: %v\nlogs:\n%s", err, b.logs.String())
	}
	t.Cleanup(b.admin.Close)
	js, _ := jetstream.New(b.admin)
	if err := events.Provision(ctx, js, events.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	if b.idkv, err = js.KeyValue(ctx, events.BucketIdentity); err != nil {
		t.Fatal(err)
	}
	return b
}

// source creates a machine user with roles and a key at the provider.
func (b *binary) source(t *testing.T, name string, roles ...string) *credential.Source {
	t.Helper()
	ctx := context.Background()
	uid, err := b.op.CreateMachineUser(ctx, name, roles...)
	if err != nil {
		t.Fatal(err)
	}
	kf, err := b.op.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: b.op.Issuer(), Key: kf, Audience: b.op.Audience()})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// device creates and registers device's identity and connects it.
func (b *binary) device(t *testing.T, device string) (*credential.Source, *nats.Conn) {
	t.Helper()
	dev := b.source(t, "device-"+device)
	v, _ := events.IdentityEntry{Device: device}.Encode()
	if _, err := b.idkv.Put(context.Background(), dev.Subject(), v); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(b.ns.ClientURL(), dev.NATSOptions(device)...)
	if err != nil {
		t.Fatalf("device connect: %v\nlogs:\n%s", err, b.logs.String())
	}
	t.Cleanup(nc.Close)
	return dev, nc
}

// stop ends run and checks that it returned nil and logged no secret.
func (b *binary) stop(t *testing.T) {
	t.Helper()
	for _, secret := range b.secrets {
		if strings.Contains(b.logs.String(), secret) {
			t.Fatal("the log contains a secret")
		}
	}
	b.cancel()
	if err := <-b.runErr; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// TestTheBinaryAuthorisesADeviceFromItsConfigFile runs the command's run
// with a configuration file against the documented NATS configuration and a
// development provider; a device then connects and publishes a report.
func TestTheBinaryAuthorisesADeviceFromItsConfigFile(t *testing.T) {
	b := startBinary(t)
	dev, nc := b.device(t, "d1")
	// The device's report is stored: the operator reads it back (reports
	// are never acknowledged).
	subj, _ := events.ReportSubject("d1", events.ReportHeartbeat)
	if _, err := natstest.PublishAndAwait(nc, b.admin, &nats.Msg{Subject: subj, Data: []byte(`{}`)}); err != nil {
		t.Fatalf("device report: %v\nlogs:\n%s", err, b.logs.String())
	}
	// Quarantine: the live connection is disconnected.
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	q, _ := events.IdentityEntry{Device: "d1", Quarantined: true}.Encode()
	if _, err := b.idkv.Put(context.Background(), dev.Subject(), q); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("quarantined device still connected after 10s\nlogs:\n%s", b.logs.String())
	}
	if strings.Contains(b.logs.String(), "metrics serving") {
		t.Fatal("metrics are served without -metrics-addr")
	}
	b.stop(t)
}

// TestTheBinaryServesItsMetrics: with -metrics-addr the command serves
// /metrics over HTTP (the Go and process collectors and the callout's),
// logs the bound address, and a device's connect is counted there; the
// scrape names no device, subject or secret.
func TestTheBinaryServesItsMetrics(t *testing.T) {
	b := startBinary(t, "-metrics-addr", "127.0.0.1:0")
	addrRE := regexp.MustCompile(`msg="metrics serving" addr=(\S+)`)
	var addr string
	testenv.Eventually(t, "the metrics address in the log", 10*time.Second, func() bool {
		if m := addrRE.FindStringSubmatch(b.logs.String()); m != nil {
			addr = m[1]
		}
		return addr != ""
	})
	dev, _ := b.device(t, "dev-metrics")
	// The operator's connect and the device's, each counted once answered.
	allowed := regexp.MustCompile(`(?m)^fleet_authcallout_authorizations_total\{reason="ok",result="allowed"\} (\d+)$`)
	var body string
	if err := testenv.Poll(context.Background(), 10*time.Second, func() bool {
		body = scrape(t, "http://"+addr+"/metrics")
		m := allowed.FindStringSubmatch(body)
		return m != nil && m[1] != "0" && m[1] != "1"
	}); err != nil {
		t.Fatalf("no two allowed connects counted in /metrics:\n%s", body)
	}
	for _, want := range []string{"fleet_authcallout_authorization_duration_seconds_bucket", "fleet_authcallout_revocations_total",
		"fleet_authcallout_token_verification_errors_total", "fleet_authcallout_jwks_refreshes_total", "go_goroutines", "process_"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	for _, secret := range append([]string{"dev-metrics", dev.Subject()}, b.secrets...) {
		if strings.Contains(body, secret) {
			t.Errorf("/metrics names a device, a subject or a secret")
		}
	}
	b.stop(t)
}

// scrape GETs url and returns the body of a 200 answer.
func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(body)
}

func TestConfigErrorsNameTheField(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no configuration names the first required field", nil, "nats_url is required"},
		{"a missing audience is named", []string{"-nats-url", "nats://x", "-oidc-issuer", "http://idp"}, "audience is required"},
		{"an unknown log format is named", []string{"-log-format", "xml"}, "log_format"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), tc.args, &out)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	p := filepath.Join(t.TempDir(), "c.json")
	if err := os.WriteFile(p, []byte(`{"nats_urll":"x"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(context.Background(), []string{"-config", p}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "nats_urll") {
		t.Fatalf("unknown field: %v", err)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/internal/natsembed"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// TestTheBinaryAuthorisesADeviceFromItsConfigFile runs the command's run
// with a configuration file against the documented NATS configuration and a
// development provider; a device then connects and publishes a report.
func TestTheBinaryAuthorisesADeviceFromItsConfigFile(t *testing.T) {
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
	t.Setenv("FLEET_CALLOUT_ISSUER", issuerPub)
	t.Setenv("FLEET_CALLOUT_XKEY", xpub)
	ns := natstest.StartWith(t, natsembed.Options{Config: string(m[1]), Sync: natsembed.FastSync})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op, err := devop.New(devop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { _ = op.Run(ctx) })

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfg := authcallout.Config{
		NATSURL: ns.ClientURL(), CalloutUser: "fleet-authcallout", CalloutPasswordFile: write("callout.pw", "pw-callout\n"),
		ReaderUser: "fleet-identity-reader", ReaderPasswordFile: write("reader.pw", "pw-reader"),
		SystemUser: "fleet-authcallout-sys", SystemPasswordFile: write("sys.pw", "pw-sys"),
		IssuerSeedFile: write("issuer.seed", string(issuerSeed)), XKeySeedFile: write("x.seed", string(xseed)),
		OIDCIssuer: op.Issuer(), Audience: op.Audience(), LogFormat: "text", LogLevel: "debug",
	}
	b, _ := json.Marshal(cfg)
	cfgPath := write("callout.json", string(b))
	var logs testenv.SyncBuffer
	runErr := make(chan error, 1)
	wg.Go(func() { runErr <- run(ctx, []string{"-config", cfgPath}, &logs) })

	source := func(name string, roles ...string) *credential.Source {
		uid, err := op.CreateMachineUser(ctx, name, roles...)
		if err != nil {
			t.Fatal(err)
		}
		kf, err := op.AddMachineKey(ctx, uid, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		src, err := credential.New(ctx, credential.Options{Issuer: op.Issuer(), Key: kf, Audience: op.Audience()})
		if err != nil {
			t.Fatal(err)
		}
		return src
	}
	opSrc := source("operator", authcallout.RoleOperator)
	var admin *nats.Conn
	deadline := time.Now().Add(30 * time.Second)
	for admin == nil {
		admin, err = nats.Connect(ns.ClientURL(), nats.TokenHandler(opSrc.TokenHandler(0)), nats.CustomInboxPrefix(authcallout.InboxPrefix(opSrc.Subject())))
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("operator connect: %v\nlogs:\n%s", err, logs.String())
		}
		select {
		case err := <-runErr:
			t.Fatalf("run returned early: %v\nlogs:\n%s", err, logs.String())
		default:
		}
	}
	defer admin.Close()
	js, _ := jetstream.New(admin)
	if err := events.Provision(ctx, js, events.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	idkv, err := js.KeyValue(ctx, events.BucketIdentity)
	if err != nil {
		t.Fatal(err)
	}
	dev := source("device-d1")
	v, _ := events.IdentityEntry{Device: "d1"}.Encode()
	if _, err := idkv.Put(ctx, dev.Subject(), v); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(ns.ClientURL(), dev.NATSOptions("d1")...)
	if err != nil {
		t.Fatalf("device connect: %v\nlogs:\n%s", err, logs.String())
	}
	defer nc.Close()
	// The device's report is stored: the operator reads it back (reports
	// are never acknowledged).
	subj, _ := events.ReportSubject("d1", events.ReportHeartbeat)
	if _, err := natstest.PublishAndAwait(nc, admin, &nats.Msg{Subject: subj, Data: []byte(`{}`)}); err != nil {
		t.Fatalf("device report: %v\nlogs:\n%s", err, logs.String())
	}
	// Quarantine: the live connection is disconnected.
	closed := make(chan struct{})
	nc.SetClosedHandler(func(*nats.Conn) { close(closed) })
	q, _ := events.IdentityEntry{Device: "d1", Quarantined: true}.Encode()
	if _, err := idkv.Put(ctx, dev.Subject(), q); err != nil {
		t.Fatal(err)
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatalf("quarantined device still connected after 10s\nlogs:\n%s", logs.String())
	}
	for _, secret := range []string{"pw-callout", "pw-reader", "pw-sys", string(issuerSeed), string(xseed)} {
		if strings.Contains(logs.String(), secret) {
			t.Fatal("the log contains a secret")
		}
	}
	cancel()
	if err := <-runErr; err != nil {
		t.Fatalf("run: %v", err)
	}
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

// Package callouttest runs, for tests, the production authentication chain
// on one machine: an embedded NATS server with the documented auth callout
// configuration (docs/security.md), the development OpenID Provider, the
// callout service, an operator connection that provisioned the Fleet
// streams, and helpers to enroll devices with a key file. Only tests import
// it.
package callouttest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
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

// Env is a running authentication chain.
type Env struct {
	NATS     *natsembed.Server
	Provider *devop.Provider
	// Admin is a control-plane connection (role fleet-operator) through the
	// callout; Store appends and reads events on it.
	Admin    *nats.Conn
	Store    *events.Store
	Identity jetstream.KeyValue
	Intent   jetstream.KeyValue
}

var signingKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// documentedConfig is the NATS configuration block of docs/security.md.
func documentedConfig(tb testing.TB) string {
	tb.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "security.md"))
	if err != nil {
		tb.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```conf\n(# fleet-authcallout: NATS server configuration\n.*?)```").FindSubmatch(b)
	if m == nil {
		tb.Fatal("docs/security.md has no NATS server configuration block")
	}
	return string(m[1])
}

// Start runs the chain until the test ends.
func Start(tb testing.TB) *Env {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	tb.Cleanup(func() { cancel(); wg.Wait() })

	issuer, err := nkeys.CreateAccount()
	if err != nil {
		tb.Fatal(err)
	}
	issuerPub, _ := issuer.PublicKey()
	xkey, err := nkeys.CreateCurveKeys()
	if err != nil {
		tb.Fatal(err)
	}
	xpub, _ := xkey.PublicKey()
	tb.Setenv("FLEET_CALLOUT_PASSWORD", "callout-secret")
	tb.Setenv("FLEET_READER_PASSWORD", "reader-secret")
	tb.Setenv("FLEET_CALLOUT_SYS_PASSWORD", "sys-secret")
	tb.Setenv("FLEET_CALLOUT_ISSUER", issuerPub)
	tb.Setenv("FLEET_CALLOUT_XKEY", xpub)
	e := &Env{}
	e.NATS = natstest.StartWith(tb, natsembed.Options{Config: documentedConfig(tb), Sync: natsembed.FastSync})

	e.Provider, err = devop.New(devop.Options{SigningKey: signingKey()})
	if err != nil {
		tb.Fatal(err)
	}
	wg.Go(func() {
		if err := e.Provider.Run(ctx); err != nil {
			tb.Error(err)
		}
	})
	verifier, err := authcallout.NewVerifier(authcallout.VerifierOptions{Issuer: e.Provider.Issuer(), Audience: e.Provider.Audience()})
	if err != nil {
		tb.Fatal(err)
	}
	reader := natstest.Connect(tb, e.NATS, nats.UserInfo("fleet-identity-reader", "reader-secret"),
		nats.CustomInboxPrefix("_INBOX_fleet-identity-reader"))
	rjs, err := jetstream.New(reader)
	if err != nil {
		tb.Fatal(err)
	}
	svc, err := authcallout.New(authcallout.Options{
		Conn: natstest.Connect(tb, e.NATS, nats.UserInfo("fleet-authcallout", "callout-secret")), Issuer: issuer, XKey: xkey,
		Account: "FLEET", Verifier: verifier, Identities: authcallout.NewKVIdentities(rjs), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		tb.Fatal(err)
	}
	wg.Go(func() {
		if err := svc.Run(ctx); err != nil {
			tb.Error(err)
		}
	})
	select {
	case <-svc.Ready():
	case <-time.After(15 * time.Second):
		tb.Fatal("auth callout not subscribed within 15s")
	}

	op := e.machine(tb, "fleet-operator", authcallout.RoleOperator)
	e.Admin, err = nats.Connect(e.NATS.ClientURL(), nats.TokenHandler(op.TokenHandler(0)),
		nats.CustomInboxPrefix(authcallout.InboxPrefix(op.Subject())), nats.Timeout(5*time.Second))
	if err != nil {
		tb.Fatalf("operator connect: %v", err)
	}
	tb.Cleanup(e.Admin.Close)
	if e.Store, err = events.NewStore(e.Admin, events.StoreOptions{}); err != nil {
		tb.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := events.Provision(pctx, e.Store.JetStream(), events.ProvisionOptions{}); err != nil {
		tb.Fatal(err)
	}
	if e.Identity, err = e.Store.JetStream().KeyValue(pctx, events.BucketIdentity); err != nil {
		tb.Fatal(err)
	}
	if e.Intent, err = e.Store.JetStream().KeyValue(pctx, events.BucketIntent); err != nil {
		tb.Fatal(err)
	}
	return e
}

func (e *Env) machine(tb testing.TB, name string, roles ...string) *credential.Source {
	tb.Helper()
	ctx := context.Background()
	uid, err := e.Provider.CreateMachineUser(ctx, name, roles...)
	if err != nil {
		tb.Fatal(err)
	}
	kf, err := e.Provider.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		tb.Fatal(err)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: e.Provider.Issuer(), Key: kf, Audience: e.Provider.Audience()})
	if err != nil {
		tb.Fatal(err)
	}
	return src
}

// EnrollDevice creates a machine user and key for device, registers the
// identity in fleet-identity as the operator does, writes the key file
// (mode 0600, with the issuer and audience as enrollment writes them) into a
// temporary folder and returns its path.
func (e *Env) EnrollDevice(tb testing.TB, device string) string {
	tb.Helper()
	ctx := context.Background()
	uid, err := e.Provider.CreateMachineUser(ctx, "device-"+device)
	if err != nil {
		tb.Fatal(err)
	}
	kf, err := e.Provider.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		tb.Fatal(err)
	}
	v, err := authcallout.IdentityEntry{Device: device}.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := e.Identity.Put(ctx, uid, v); err != nil {
		tb.Fatal(err)
	}
	kf.Issuer, kf.Audience, kf.Device = e.Provider.Issuer(), e.Provider.Audience(), device
	path := filepath.Join(tb.TempDir(), device+".json")
	if err := credential.WriteKeyFile(path, kf); err != nil {
		tb.Fatal(err)
	}
	return path
}

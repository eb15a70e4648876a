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

	// Conf is the server configuration text and StoreDir its JetStream
	// folder (tests that restart the server reuse both).
	Conf     string
	StoreDir string
	// Issuer signs the callout's user JWTs; XKey encrypts its requests
	// (nil with Options.Plain).
	Issuer   nkeys.KeyPair
	XKey     nkeys.KeyPair
	Verifier *authcallout.Verifier
}

// Options vary the chain for tests of the callout itself.
type Options struct {
	// TokenLifetime of the provider's id_tokens; zero: devop's default.
	TokenLifetime time.Duration
	// Plain drops the xkey: the callout gets plain requests.
	Plain bool
	// Replicas is the number of callout services (a queue group); default 1.
	Replicas int
	// Logger receives the callout services' logs; default discarded.
	Logger *slog.Logger
	// MinKeyRefresh is the verifier's least time between two JWKS fetches;
	// zero: the production default.
	MinKeyRefresh time.Duration
}

var signingKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

// SigningKey is the RSA key every test provider signs with (generating
// one is slow); tests forge tokens with it.
func SigningKey() *rsa.PrivateKey { return signingKey() }

// DocumentedConfig is the NATS configuration block of docs/security.md.
func DocumentedConfig(tb testing.TB) string {
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
		tb.Fatal("docs/security.md has no ```conf block starting with '# fleet-authcallout: NATS server configuration'")
	}
	return string(m[1])
}

// Start runs the chain as production configures it.
func Start(tb testing.TB) *Env { return StartWith(tb, Options{}) }

// StartWith runs the chain with o.
func StartWith(tb testing.TB, o Options) *Env {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	tb.Cleanup(func() { cancel(); wg.Wait() })
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}

	e := &Env{}
	var err error
	if e.Issuer, err = nkeys.CreateAccount(); err != nil {
		tb.Fatal(err)
	}
	issuerPub, _ := e.Issuer.PublicKey()
	if e.XKey, err = nkeys.CreateCurveKeys(); err != nil {
		tb.Fatal(err)
	}
	xpub, _ := e.XKey.PublicKey()
	e.Conf = DocumentedConfig(tb)
	if o.Plain {
		e.Conf = regexp.MustCompile(`(?m)^\s*xkey: .*$`).ReplaceAllString(e.Conf, "")
		e.XKey = nil
	}
	tb.Setenv("FLEET_CALLOUT_PASSWORD", "callout-secret")
	tb.Setenv("FLEET_READER_PASSWORD", "reader-secret")
	tb.Setenv("FLEET_CALLOUT_SYS_PASSWORD", "sys-secret")
	tb.Setenv("FLEET_CALLOUT_ISSUER", issuerPub)
	tb.Setenv("FLEET_CALLOUT_XKEY", xpub)
	e.StoreDir = tb.TempDir()
	e.NATS = natstest.StartWith(tb, natsembed.Options{Config: e.Conf, StoreDir: e.StoreDir, Sync: natsembed.FastSync})

	e.Provider, err = devop.New(devop.Options{SigningKey: signingKey(), TokenLifetime: o.TokenLifetime})
	if err != nil {
		tb.Fatal(err)
	}
	wg.Go(func() {
		if err := e.Provider.Run(ctx); err != nil {
			tb.Error(err)
		}
	})
	e.Verifier, err = authcallout.NewVerifier(authcallout.VerifierOptions{
		Issuer: e.Provider.Issuer(), Audience: e.Provider.Audience(), MinRefreshInterval: o.MinKeyRefresh,
	})
	if err != nil {
		tb.Fatal(err)
	}
	reader := natstest.Connect(tb, e.NATS, nats.UserInfo("fleet-identity-reader", "reader-secret"),
		nats.CustomInboxPrefix("_INBOX_fleet-identity-reader"))
	sys := natstest.Connect(tb, e.NATS, nats.UserInfo("fleet-authcallout-sys", "sys-secret"),
		nats.CustomInboxPrefix("_INBOX_fleet-authcallout-sys"))
	rjs, err := jetstream.New(reader)
	if err != nil {
		tb.Fatal(err)
	}
	svcs := make([]*authcallout.Service, max(o.Replicas, 1))
	for i := range svcs {
		svcs[i], err = authcallout.New(authcallout.Options{
			Conn: natstest.Connect(tb, e.NATS, nats.UserInfo("fleet-authcallout", "callout-secret")), Issuer: e.Issuer, XKey: e.XKey,
			Account: authcallout.AccountFleet, DeviceAccount: authcallout.AccountDevices, Verifier: e.Verifier, Identities: authcallout.NewKVIdentities(rjs), Logger: o.Logger,
			Watch: reader, System: sys,
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
	for _, s := range svcs {
		wg.Go(func() {
			if err := s.Run(ctx); err != nil {
				tb.Error(err)
			}
		})
	}
	for _, s := range svcs {
		select {
		case <-s.Ready():
		case <-time.After(15 * time.Second):
			tb.Fatal("auth callout not subscribed within 15s")
		}
	}

	op := e.Machine(tb, "fleet-operator", authcallout.RoleOperator)
	e.Admin = ConnectAs(tb, e.NATS, op.Subject(), op)
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

// ConnectAs connects a control-plane identity name with its token
// callback, closed when the test ends.
func ConnectAs(tb testing.TB, ns *natsembed.Server, name string, src *credential.Source, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(ns.ClientURL(), append([]nats.Option{
		nats.TokenHandler(src.TokenHandler(0)), nats.CustomInboxPrefix(authcallout.InboxPrefix(name)), nats.Timeout(5 * time.Second),
	}, opts...)...)
	if err != nil {
		tb.Fatalf("connect %s: %v", name, err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// Machine creates a machine user with roles and a key, and returns its
// token source.
func (e *Env) Machine(tb testing.TB, name string, roles ...string) *credential.Source {
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

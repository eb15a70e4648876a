// Package callouttest runs, for tests, the production authentication chain
// on one machine, assembled by controlplane: an embedded NATS
// server with the documented auth callout configuration (docs/security.md),
// the development OpenID Provider, the callout service, an operator
// connection that provisioned the Fleet streams, and helpers to enroll
// devices with a key file. Only tests import it (internal/hygiene checks).
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
	"github.com/nationtech/harmony-fleet/controlplane"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
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

	plane *controlplane.Plane
}

// Options vary the chain for tests of the callout itself.
type Options struct {
	// TokenLifetime of the provider's id_tokens; zero: devop's default.
	TokenLifetime time.Duration
	// Plain drops the xkey: the callout gets plain requests.
	Plain bool
	// Replicas is the number of callout services (a queue group); default 1.
	Replicas int
	// Logger receives the chain's logs (the callout services', the
	// server's, the provider's, each with a "component" attribute);
	// default discarded.
	Logger *slog.Logger
	// MinKeyRefresh is the verifier's least time between two JWKS fetches;
	// zero: the production default.
	MinKeyRefresh time.Duration
	// Metrics records the callout services' answers; optional.
	// EditConfig, when set, changes the documented configuration text
	// before the server reads it (a test's shorter ping interval).
	Metrics    *authcallout.Metrics
	EditConfig func(conf string) string
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

// StartWith runs the chain with o: a control plane (controlplane)
// on the documented configuration text, its $FLEET_... variables set in the
// environment as production sets them, stopped when the test ends; a part
// that failed fails the test then.
func StartWith(tb testing.TB, o Options) *Env {
	tb.Helper()
	sec, err := controlplane.NewSecrets()
	if err != nil {
		tb.Fatal(err)
	}
	issuerPub, _ := sec.Issuer.PublicKey()
	xpub, _ := sec.XKey.PublicKey()
	tb.Setenv("FLEET_CALLOUT_PASSWORD", sec.CalloutPassword)
	tb.Setenv("FLEET_READER_PASSWORD", sec.ReaderPassword)
	tb.Setenv("FLEET_CALLOUT_SYS_PASSWORD", sec.SysPassword)
	tb.Setenv("FLEET_PRESENCE_PASSWORD", sec.PresencePassword)
	tb.Setenv("FLEET_CALLOUT_ISSUER", issuerPub)
	tb.Setenv("FLEET_CALLOUT_XKEY", xpub)
	e := &Env{StoreDir: tb.TempDir()}
	conf := DocumentedConfig(tb)
	if o.EditConfig != nil {
		conf = o.EditConfig(conf)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e.plane, err = controlplane.Start(ctx, controlplane.Options{
		StoreDir: e.StoreDir, Port: -1, Sync: natsembed.FastSync, Logger: o.Logger,
		Secrets: sec, Config: conf, Plain: o.Plain,
		SigningKey: signingKey(), TokenLifetime: o.TokenLifetime, MinKeyRefresh: o.MinKeyRefresh, Replicas: o.Replicas,
		CalloutMetrics: o.Metrics,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := e.plane.Close(); err != nil {
			tb.Error(err)
		}
	})
	p := e.plane
	e.NATS, e.Provider, e.Verifier, e.Conf = p.Server(), p.Provider(), p.Verifier(), p.Config()
	e.Issuer, e.XKey = p.Issuer(), p.XKey()
	e.Admin, e.Store, e.Identity, e.Intent = p.Operator(), p.Store(), p.Identity(), p.Intent()
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
	src, err := e.plane.Machine(context.Background(), name, roles...)
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
	path := filepath.Join(tb.TempDir(), device+".json")
	if _, err := e.plane.EnrollDevice(context.Background(), device, path); err != nil {
		tb.Fatal(err)
	}
	return path
}

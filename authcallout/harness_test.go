package authcallout_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"log/slog"
	"os"
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
)

// documentedConfig is the NATS configuration block of docs/security.md.
func documentedConfig(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile("../docs/security.md")
	if err != nil {
		tb.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```conf\n(# fleet-authcallout: NATS server configuration\n.*?)```").FindSubmatch(b)
	if m == nil {
		tb.Fatal("docs/security.md has no ```conf block starting with '# fleet-authcallout: NATS server configuration'")
	}
	return string(m[1])
}

// signingKey is shared by every test provider: generating RSA keys is slow,
// and tests forge tokens with it.
var signingKey = sync.OnceValue(func() *rsa.PrivateKey {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	return k
})

type envOptions struct {
	tokenLifetime time.Duration
	plain         bool // no xkey: plain requests
	replicas      int  // callout services; default 1
}

// env is a NATS server running the documented configuration, a dev OpenID
// Provider, the callout service(s) and an operator connection.
type env struct {
	conf     string // the server configuration text
	storeDir string
	ns       *natsembed.Server
	op       *devop.Provider
	issuer   nkeys.KeyPair
	xkey     nkeys.KeyPair
	admin    *nats.Conn
	js       jetstream.JetStream
	identity jetstream.KeyValue
	intent   jetstream.KeyValue
	verifier *authcallout.Verifier
	refusals *refusalLog
}

// refusalLog records the reason of every refusal the callout logs.
type refusalLog struct {
	mu      sync.Mutex // guards reasons
	reasons []string
}

func (l *refusalLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *refusalLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *refusalLog) WithGroup(string) slog.Handler            { return l }
func (l *refusalLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "connect refused" && r.Message != "auth callout request refused" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "reason" {
			l.mu.Lock()
			l.reasons = append(l.reasons, a.Value.String())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

// last returns the latest refusal reason.
func (l *refusalLog) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.reasons) == 0 {
		return ""
	}
	return l.reasons[len(l.reasons)-1]
}

func newEnv(tb testing.TB, o envOptions) *env {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	tb.Cleanup(func() { cancel(); wg.Wait() })

	e := &env{refusals: &refusalLog{}}
	var err error
	if e.issuer, err = nkeys.CreateAccount(); err != nil {
		tb.Fatal(err)
	}
	issuerPub, _ := e.issuer.PublicKey()
	if e.xkey, err = nkeys.CreateCurveKeys(); err != nil {
		tb.Fatal(err)
	}
	xpub, _ := e.xkey.PublicKey()
	conf := documentedConfig(tb)
	if o.plain {
		conf = regexp.MustCompile(`(?m)^\s*xkey: .*$`).ReplaceAllString(conf, "")
		e.xkey = nil
	}
	tb.Setenv("FLEET_CALLOUT_PASSWORD", "callout-secret")
	tb.Setenv("FLEET_READER_PASSWORD", "reader-secret")
	tb.Setenv("FLEET_CALLOUT_SYS_PASSWORD", "sys-secret")
	tb.Setenv("FLEET_CALLOUT_ISSUER", issuerPub)
	tb.Setenv("FLEET_CALLOUT_XKEY", xpub)
	e.conf, e.storeDir = conf, tb.TempDir()
	e.ns = natstest.StartWith(tb, natsembed.Options{Config: conf, StoreDir: e.storeDir, Sync: natsembed.FastSync})

	e.op, err = devop.New(devop.Options{SigningKey: signingKey(), TokenLifetime: o.tokenLifetime})
	if err != nil {
		tb.Fatal(err)
	}
	wg.Go(func() {
		if err := e.op.Run(ctx); err != nil {
			tb.Error(err)
		}
	})
	e.verifier, err = authcallout.NewVerifier(authcallout.VerifierOptions{
		Issuer: e.op.Issuer(), Audience: e.op.Audience(), MinRefreshInterval: time.Millisecond,
	})
	if err != nil {
		tb.Fatal(err)
	}

	reader := natstest.Connect(tb, e.ns, nats.UserInfo("fleet-identity-reader", "reader-secret"),
		nats.CustomInboxPrefix("_INBOX_fleet-identity-reader"))
	sys := natstest.Connect(tb, e.ns, nats.UserInfo("fleet-authcallout-sys", "sys-secret"),
		nats.CustomInboxPrefix("_INBOX_fleet-authcallout-sys"))
	rjs, err := jetstream.New(reader)
	if err != nil {
		tb.Fatal(err)
	}

	// The operator: a machine user with the fleet-operator role, through
	// the callout like everyone else.
	replicas := max(o.replicas, 1)
	svcs := make([]*authcallout.Service, replicas)
	for i := range svcs {
		nc := natstest.Connect(tb, e.ns, nats.UserInfo("fleet-authcallout", "callout-secret"))
		svcs[i], err = authcallout.New(authcallout.Options{
			Conn: nc, Issuer: e.issuer, XKey: e.xkey, Account: "FLEET", Verifier: e.verifier,
			Identities: authcallout.NewKVIdentities(rjs), Logger: slog.New(e.refusals),
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
	opSrc := e.machine(tb, "fleet-operator", authcallout.RoleOperator)
	e.admin = connectAs(tb, e.ns, opSrc.Subject(), opSrc)
	if e.js, err = jetstream.New(e.admin); err != nil {
		tb.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := events.Provision(pctx, e.js, events.ProvisionOptions{}); err != nil {
		tb.Fatal(err)
	}
	if e.identity, err = e.js.KeyValue(pctx, events.BucketIdentity); err != nil {
		tb.Fatal(err)
	}
	if e.intent, err = e.js.KeyValue(pctx, events.BucketIntent); err != nil {
		tb.Fatal(err)
	}
	return e
}

// connectAs connects a control-plane identity with its token callback.
func connectAs(tb testing.TB, ns *natsembed.Server, name string, src *credential.Source, opts ...nats.Option) *nats.Conn {
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

// machine creates a machine user with a key and returns its token source.
func (e *env) machine(tb testing.TB, name string, roles ...string) *credential.Source {
	tb.Helper()
	ctx := context.Background()
	uid, err := e.op.CreateMachineUser(ctx, name, roles...)
	if err != nil {
		tb.Fatal(err)
	}
	kf, err := e.op.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		tb.Fatal(err)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: e.op.Issuer(), Key: kf, Audience: e.op.Audience()})
	if err != nil {
		tb.Fatal(err)
	}
	return src
}

// device creates a machine user for device, registers it in fleet-identity
// and returns its token source.
func (e *env) device(tb testing.TB, device string, quarantined bool) *credential.Source {
	tb.Helper()
	src := e.machine(tb, "device-"+device)
	e.register(tb, src.Subject(), device, quarantined)
	return src
}

func (e *env) register(tb testing.TB, subject, device string, quarantined bool) {
	tb.Helper()
	v, err := authcallout.IdentityEntry{Device: device, Quarantined: quarantined}.Encode()
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := e.identity.Put(context.Background(), subject, v); err != nil {
		tb.Fatal(err)
	}
}

// conn is a client connection with its asynchronous errors.
type conn struct {
	*nats.Conn
	errs chan error
}

// connect connects as device with token (or the source's token callback
// when token is "") and the device's own inbox prefix unless opts say
// otherwise.
func (e *env) connect(device string, src *credential.Source, token string, opts ...nats.Option) (*conn, error) {
	c := &conn{errs: make(chan error, 64)}
	auth := nats.Token(token)
	if token == "" && src != nil {
		auth = nats.TokenHandler(src.TokenHandler(0))
	}
	all := append([]nats.Option{
		auth,
		nats.CustomInboxPrefix(authcallout.InboxPrefix(device)),
		nats.NoReconnect(),
		nats.Timeout(5 * time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errs <- err:
			default:
			}
		}),
	}, opts...)
	nc, err := nats.Connect(e.ns.ClientURL(), all...)
	if err != nil {
		return nil, err
	}
	c.Conn = nc
	return c, nil
}

// waitViolation waits for a permissions violation naming subject (a quoted
// prefix of it when subject ends in "*").
func (c *conn) waitViolation(tb testing.TB, subject string) {
	tb.Helper()
	want := `"` + subject + `"`
	if p, ok := strings.CutSuffix(subject, "*"); ok {
		want = `"` + p
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), want) {
				return
			}
		case <-deadline:
			tb.Fatalf("no permissions violation for %q within 10s", subject)
		}
	}
}

// noViolation flushes and checks that no asynchronous error arrived.
func (c *conn) noViolation(tb testing.TB) {
	tb.Helper()
	if err := c.FlushTimeout(5 * time.Second); err != nil {
		tb.Fatal(err)
	}
	select {
	case err := <-c.errs:
		tb.Fatalf("unexpected asynchronous error: %v", err)
	default:
	}
}

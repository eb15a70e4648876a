package authcallout_test

import (
	"context"
	"errors"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"log/slog"
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
)

// signingKey is the key every test provider signs with; tests forge
// tokens with it.
var signingKey = callouttest.SigningKey

type envOptions struct {
	tokenLifetime time.Duration
	plain         bool // no xkey: plain requests
	replicas      int  // callout services; default 1
	metrics       *authcallout.Metrics
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
	chain    *callouttest.Env
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
	refusals := &refusalLog{}
	c := callouttest.StartWith(tb, callouttest.Options{
		TokenLifetime: o.tokenLifetime, Plain: o.plain, Replicas: o.replicas,
		Logger: slog.New(refusals), MinKeyRefresh: time.Millisecond, Metrics: o.metrics,
	})
	return &env{
		conf: c.Conf, storeDir: c.StoreDir, ns: c.NATS, op: c.Provider, issuer: c.Issuer, xkey: c.XKey,
		admin: c.Admin, js: c.Store.JetStream(), identity: c.Identity, intent: c.Intent, verifier: c.Verifier,
		refusals: refusals, chain: c,
	}
}

// machine creates a machine user with a key and returns its token source.
func (e *env) machine(tb testing.TB, name string, roles ...string) *credential.Source {
	return e.chain.Machine(tb, name, roles...)
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
	v, err := events.IdentityEntry{Device: device, Quarantined: quarantined}.Encode()
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

package authcallout_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/lestrrat-go/jwx/v2/jwt"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
)

// forge signs claims with alg and key under kid.
func forge(tb testing.TB, claims map[string]any, alg jwa.SignatureAlgorithm, key any, kid string) string {
	tb.Helper()
	tok := jwt.New()
	for k, v := range claims {
		if err := tok.Set(k, v); err != nil {
			tb.Fatal(err)
		}
	}
	hdr := jws.NewHeaders()
	if err := hdr.Set(jws.KeyIDKey, kid); err != nil {
		tb.Fatal(err)
	}
	b, err := jwt.Sign(tok, jwt.WithKey(alg, key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// unsigned builds an alg:none token.
func unsigned(tb testing.TB, claims map[string]any, kid string) string {
	tb.Helper()
	h, _ := json.Marshal(map[string]string{"alg": "none", "kid": kid, "typ": "JWT"})
	p, err := json.Marshal(claims)
	if err != nil {
		tb.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(p) + "."
}

// TestConnectsAreRefused: each token is refused at connect (the server
// answers an authorization violation) for the reason the callout logs.
func TestConnectsAreRefused(t *testing.T) {
	e := newEnv(t, envOptions{})
	const subject, device = "forged-subject", "dev-forged"
	e.register(t, subject, device, false)
	now := time.Now()
	claims := func(edit func(map[string]any)) map[string]any {
		c := map[string]any{
			"iss": e.op.Issuer(), "sub": subject, "aud": []string{e.op.Audience()},
			"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		}
		if edit != nil {
			edit(c)
		}
		return c
	}
	kid := e.op.SigningKeyID()
	good := func(edit func(map[string]any)) string {
		return forge(t, claims(edit), jwa.RS256, signingKey(), kid)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: must(x509.MarshalPKIXPublicKey(&signingKey().PublicKey))})

	unknown := e.machine(t, "not-a-device")
	quarantined := e.device(t, "dev-q", true)
	revoked := e.machine(t, "device-dev-r")
	e.register(t, revoked.Subject(), "dev-r", false)

	tests := []struct {
		name   string
		token  func(t *testing.T) string
		src    *credential.Source // when set, connect with its token callback
		reason error              // the refusal's sentinel; nil: accepted
	}{
		{"a well-formed token signed by the provider is accepted (control)", func(*testing.T) string { return good(nil) }, nil, nil},
		{"no token is refused", func(*testing.T) string { return "" }, nil, authcallout.ErrNoToken},
		{"a garbage token is refused", func(*testing.T) string { return "garbage" }, nil, authcallout.ErrMalformedToken},
		{"three garbage segments are refused", func(*testing.T) string { return "a.b.c" }, nil, authcallout.ErrMalformedToken},
		{"a signature by another key under the provider's kid is refused", func(*testing.T) string {
			return forge(t, claims(nil), jwa.RS256, other, kid)
		}, nil, authcallout.ErrInvalidToken},
		{"alg none is refused", func(*testing.T) string { return unsigned(t, claims(nil), kid) }, nil, authcallout.ErrAlgorithm},
		{"HS256 keyed with the provider's public key is refused", func(*testing.T) string {
			return forge(t, claims(nil), jwa.HS256, pubPEM, kid)
		}, nil, authcallout.ErrAlgorithm},
		{"RS512 (not in the allow-list) is refused", func(*testing.T) string {
			return forge(t, claims(nil), jwa.RS512, signingKey(), kid)
		}, nil, authcallout.ErrAlgorithm},
		{"an unknown kid is refused", func(*testing.T) string {
			return forge(t, claims(nil), jwa.RS256, signingKey(), "no-such-kid")
		}, nil, authcallout.ErrUnknownKey},
		{"an expired token is refused", func(*testing.T) string {
			return good(func(c map[string]any) {
				c["iat"] = now.Add(-time.Hour).Unix()
				c["exp"] = now.Add(-10 * time.Minute).Unix()
			})
		}, nil, authcallout.ErrInvalidToken},
		{"a token not yet valid is refused", func(*testing.T) string {
			return good(func(c map[string]any) { c["nbf"] = now.Add(10 * time.Minute).Unix() })
		}, nil, authcallout.ErrInvalidToken},
		{"a token issued in the future is refused", func(*testing.T) string {
			return good(func(c map[string]any) { c["iat"] = now.Add(10 * time.Minute).Unix() })
		}, nil, authcallout.ErrInvalidToken},
		{"a wrong issuer is refused", func(*testing.T) string {
			return good(func(c map[string]any) { c["iss"] = "https://evil.example" })
		}, nil, authcallout.ErrInvalidToken},
		{"a wrong audience is refused", func(*testing.T) string {
			return good(func(c map[string]any) { c["aud"] = []string{"another-project"} })
		}, nil, authcallout.ErrInvalidToken},
		{"a token without exp is refused", func(*testing.T) string {
			return good(func(c map[string]any) { delete(c, "exp") })
		}, nil, authcallout.ErrInvalidToken},
		{"a token without sub is refused", func(*testing.T) string {
			return good(func(c map[string]any) { delete(c, "sub") })
		}, nil, authcallout.ErrInvalidToken},
		{"a role claim forged into a token by another key is refused", func(*testing.T) string {
			return forge(t, claims(func(c map[string]any) { c[authcallout.RolesClaim] = map[string]any{"fleet-operator": map[string]any{}} }), jwa.RS256, other, kid)
		}, nil, authcallout.ErrInvalidToken},
		{"a subject unknown to fleet-identity is refused", nil, unknown, authcallout.ErrUnknownIdentity},
		{"a quarantined device is refused", nil, quarantined, authcallout.ErrQuarantined},
		{"a revoked key gets no token, so the device is refused", nil, revoked, authcallout.ErrNoToken},
	}
	// The revoked device worked before its key was removed.
	if c, err := e.connect("dev-r", revoked, ""); err != nil {
		t.Fatalf("device dev-r before revocation: %v", err)
	} else {
		c.Close()
	}
	u, _ := e.op.User(context.Background(), revoked.Subject())
	for _, k := range u.KeyIDs {
		if err := e.op.RemoveMachineKey(context.Background(), revoked.Subject(), k); err != nil {
			t.Fatal(err)
		}
	}
	revoked.Invalidate()
	if _, err := revoked.Token(context.Background()); !errors.Is(err, credential.ErrGrant) {
		t.Fatalf("grant after revocation: %v, want ErrGrant", err)
	}

	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var token string
			dev := device
			if tc.token != nil {
				token = tc.token(t)
			}
			var c *conn
			var err error
			if tc.src != nil {
				c, err = e.connect(dev, tc.src, "")
			} else if token == "" {
				c, err = e.connect(dev, nil, "")
			} else {
				c, err = e.connect(dev, nil, token)
			}
			if tc.reason == nil {
				if err != nil {
					t.Fatalf("connect refused: %v", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("connect accepted, want refused")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("connect error %v, want an authorization violation", err)
			}
			if got := e.refusals.last(); !strings.Contains(got, tc.reason.Error()) {
				t.Fatalf("callout refusal reason %q, want %q", got, tc.reason)
			}
			if token != "" && strings.Contains(e.refusals.last(), token) {
				t.Fatal("the refusal log quotes the token")
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestADeviceCannotReachBeyondItsSubjects: device A is connected; each action
// is refused by the server with a permissions violation.
func TestADeviceCannotReachBeyondItsSubjects(t *testing.T) {
	e := newEnv(t, envOptions{})
	srcA := e.device(t, "dev-a", false)
	e.device(t, "dev-b", false)
	if _, err := e.intent.Put(context.Background(), "dev-b", []byte(`{"secret":"b"}`)); err != nil {
		t.Fatal(err)
	}
	bIntent, _ := events.IntentNotifySubject("dev-b")
	bKV, _ := events.IntentKVSubject("dev-b")
	bDirect, _ := events.IntentDirectGetSubject("dev-b")
	bReport, _ := events.ReportSubject("dev-b", events.ReportHeartbeat)
	bHealth, _ := events.ReportSubject("dev-b", events.ReportHealth)
	bContainers, _ := events.ReportSubject("dev-b", events.ReportContainers)
	bCommand, _ := events.CommandSubject("dev-b")
	sub := func(subject string) func(t *testing.T, c *conn) string {
		return func(t *testing.T, c *conn) string {
			if _, err := c.SubscribeSync(subject); err != nil {
				t.Fatal(err)
			}
			return subject
		}
	}
	pub := func(subject string) func(t *testing.T, c *conn) string {
		return func(t *testing.T, c *conn) string {
			if err := c.PublishRequest(subject, authcallout.InboxPrefix("dev-a")+".x", []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
			return subject
		}
	}
	tests := []struct {
		name string
		opts []nats.Option
		act  func(t *testing.T, c *conn) string // returns the subject the violation names
	}{
		{"subscribing to B's intent is refused", nil, sub(bIntent)},
		{"subscribing to every intent is refused", nil, sub("fleet.notify.intent.>")},
		{"subscribing to B's intent key is refused", nil, sub(bKV)},
		{"subscribing to every intent key is refused", nil, sub("$KV.fleet-intent.>")},
		{"subscribing to > is refused", nil, sub(">")},
		{"subscribing to B's commands is refused", nil, sub(bCommand)},
		{"subscribing to B's inbox is refused", nil, sub("_INBOX_dev-b.>")},
		{"subscribing to the default inbox is refused", nil, sub("_INBOX.>")},
		{"direct-getting B's intent is refused", nil, pub(bDirect)},
		{"the payload form of direct get is refused", nil, pub("$JS.API.DIRECT.GET.KV_fleet-intent")},
		{"publishing B's report is refused", nil, pub(bReport)},
		{"publishing B's health report is refused", nil, pub(bHealth)},
		{"publishing B's containers report is refused", nil, pub(bContainers)},
		{"publishing a report kind that does not exist is refused", nil, pub("fleet.report.dev-a.other")},
		{"publishing intent is refused", nil, pub("fleet.intent.deployment.ns.web")},
		{"answering a logs request as B is refused", nil, pub(must(events.LogsSubject("dev-b", logsReader, logsRequest)))},
		{"a logs answer with an extra token is refused", nil, pub("fleet.logs.dev-a." + logsReader + "." + logsRequest + ".x")},
		{"a logs answer with a missing token is refused", nil, pub("fleet.logs.dev-a." + logsReader)},
		// The device account maps every intent notification subject to a
		// void subject before the permission check, which then refuses it.
		{"writing its own intent key is refused", nil, pub("$KV.fleet-intent.dev-a")},
		{"publishing on its own intent notification subject is refused", nil, func(t *testing.T, c *conn) string {
			pub("fleet.notify.intent.dev-a")(t, c)
			return "fleet.void.intent"
		}},
		{"publishing on its own command subject is refused", nil, func(t *testing.T, c *conn) string {
			pub("fleet.command.dev-a")(t, c)
			return "fleet.void.command"
		}},
		{"deleting a stream is refused", nil, pub("$JS.API.STREAM.DELETE.FLEET_REPORTS")},
		{"listing streams is refused", nil, pub("$JS.API.STREAM.LIST")},
		{"creating a consumer with filter > is refused", nil, func(t *testing.T, c *conn) string {
			js, err := jetstream.New(c.Conn)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if _, err := js.CreateOrUpdateConsumer(ctx, events.StreamReports, jetstream.ConsumerConfig{Name: "steal", FilterSubject: ">"}); err == nil {
				t.Fatal("consumer created")
			}
			return "$JS.API.CONSUMER.CREATE.FLEET_REPORTS*"
		}},
		{"a request with another device's inbox prefix is refused", []nats.Option{nats.CustomInboxPrefix("_INBOX_dev-b")}, func(t *testing.T, c *conn) string {
			dg, _ := events.IntentDirectGetSubject("dev-a")
			_, _ = c.Request(dg, nil, time.Second)
			return "_INBOX_dev-b*"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := e.connect("dev-a", srcA, "", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.waitViolation(t, tc.act(t, c))
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.js.Stream(ctx, events.StreamReports); err != nil {
		t.Fatalf("reports stream after the attempts: %v", err)
	}
}

// TestAnExpiringTokenClosesTheConnection: the user JWT expires with the
// id_token and the server closes the connection.
func TestAnExpiringTokenClosesTheConnection(t *testing.T) {
	e := newEnv(t, envOptions{})
	e.register(t, "short-lived", "dev-s", false)
	now := time.Now()
	tok := forge(t, map[string]any{
		"iss": e.op.Issuer(), "sub": "short-lived", "aud": []string{e.op.Audience()},
		"iat": now.Unix(), "exp": now.Add(4 * time.Second).Unix(), // 3–4 s: room for a slow connect
	}, jwa.RS256, signingKey(), e.op.SigningKeyID())
	closed := make(chan struct{})
	c, err := e.connect("dev-s", nil, tok, nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	select {
	case <-closed:
	case <-time.After(15 * time.Second):
		t.Fatal("connection still open 15s after its token expired")
	}
	var got []error
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrAuthExpired) {
				return
			}
			got = append(got, err)
			continue
		default:
		}
		break
	}
	t.Fatalf("errors %v, want %v from the server", got, nats.ErrAuthExpired)
}

// TestEveryReconnectPresentsAFreshToken: with a short token lifetime the
// server drops the connection at expiry and the client reconnects with a
// new id_token from its token callback.
func TestEveryReconnectPresentsAFreshToken(t *testing.T) {
	e := newEnv(t, envOptions{tokenLifetime: 3 * time.Second})
	src := e.device(t, "dev-f", false)
	first, err := src.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	reconnected := make(chan struct{}, 1)
	nc, err := nats.Connect(e.ns.ClientURL(), append(src.NATSOptions("dev-f"),
		nats.ReconnectHandler(func(*nats.Conn) {
			select {
			case reconnected <- struct{}{}:
			default:
			}
		}),
		nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}),
		nats.ReconnectWait(100*time.Millisecond), nats.MaxReconnects(-1))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	select {
	case <-reconnected:
	case <-time.After(20 * time.Second):
		t.Fatal("no reconnect within 20s of a 3s token")
	}
	second, err := src.Token(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if second.IDToken == first.IDToken || !second.Expiry.After(first.Expiry) {
		t.Fatalf("token after reconnect expires %s, the first %s: not refreshed", second.Expiry, first.Expiry)
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		t.Fatalf("reconnected connection: %v", err)
	}
}

// TestQuarantiningAConnectedDeviceDisconnectsIt: the callout follows
// fleet-identity and kicks the live connection of a device that becomes
// quarantined; its reconnect is refused.
func TestQuarantiningAConnectedDeviceDisconnectsIt(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, e *env, subject string)
	}{
		{"quarantine disconnects", func(t *testing.T, e *env, subject string) { e.register(t, subject, "dev-live", true) }},
		{"removing the identity disconnects", func(t *testing.T, e *env, subject string) {
			if err := e.identity.Delete(context.Background(), subject); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, envOptions{})
			src := e.device(t, "dev-live", false)
			closed := make(chan struct{})
			c, err := e.connect("dev-live", src, "", nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.noViolation(t)
			tc.change(t, e, src.Subject())
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("the connection is still open 10s after the change")
			}
			if _, err := e.connect("dev-live", src, ""); !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("reconnect: %v, want an authorization violation", err)
			}
		})
	}
}

package authcallout_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/metrics"
)

// metered is the documented chain (server configuration, development
// provider, one callout replica with live revocation, an operator
// connection that provisioned the buckets) with the callout's metrics on a
// registry of their own.
type metered struct {
	ns       *natsembed.Server
	op       *devop.Provider
	identity jetstream.KeyValue
	reg      *prometheus.Registry
	// secrets are the passwords, seeds and public keys of the chain: no
	// label value may contain one.
	secrets []string
}

func newMetered(t *testing.T) *metered {
	t.Helper()
	issuer, _ := nkeys.CreateAccount()
	issuerPub, _ := issuer.PublicKey()
	issuerSeed, _ := issuer.Seed()
	xkey, _ := nkeys.CreateCurveKeys()
	xpub, _ := xkey.PublicKey()
	xseed, _ := xkey.Seed()
	vars := authcallout.ConfigVars{CalloutPassword: "pw-callout-metered", ReaderPassword: "pw-reader-metered",
		SysPassword: "pw-sys-metered", Issuer: issuerPub, XKey: xpub}
	conf, err := authcallout.ServerConfigWith(vars, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &metered{reg: prometheus.NewRegistry(),
		secrets: []string{vars.CalloutPassword, vars.ReaderPassword, vars.SysPassword, issuerPub, string(issuerSeed), xpub, string(xseed)}}
	e.ns = natstest.StartWith(t, natsembed.Options{Config: conf, Sync: natsembed.FastSync})
	if e.op, err = devop.New(devop.Options{SigningKey: signingKey()}); err != nil {
		t.Fatal(err)
	}
	m := authcallout.NewMetrics()
	e.reg.MustRegister(m.Collectors()...)
	r, err := authcallout.Connect(authcallout.ReplicaOptions{URL: e.ns.ClientURL(), CalloutPassword: vars.CalloutPassword,
		ReaderPassword: vars.ReaderPassword, SystemPassword: vars.SysPassword, Issuer: issuer, XKey: xkey,
		VerifierOptions: authcallout.VerifierOptions{Issuer: e.op.Issuer(), Audience: e.op.Audience()}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() { errs <- e.op.Run(ctx) })
	wg.Go(func() { errs <- r.Run(ctx) })
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		r.Close()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})
	select {
	case <-r.Ready():
	case err := <-errs:
		t.Fatalf("the callout stopped before it subscribed: %v", err)
	}
	admin := e.machine(t, "operator", authcallout.RoleOperator)
	nc := natstest.Connect(t, e.ns, nats.TokenHandler(admin.TokenHandler(0)), nats.CustomInboxPrefix(authcallout.InboxPrefix(admin.Subject())))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Provision(ctx, js, events.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	if e.identity, err = js.KeyValue(ctx, events.BucketIdentity); err != nil {
		t.Fatal(err)
	}
	return e
}

// machine creates a machine user with roles and a key at the provider.
func (e *metered) machine(t *testing.T, name string, roles ...string) *credential.Source {
	t.Helper()
	ctx := context.Background()
	uid, err := e.op.CreateMachineUser(ctx, name, roles...)
	if err != nil {
		t.Fatal(err)
	}
	kf, err := e.op.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: e.op.Issuer(), Key: kf, Audience: e.op.Audience()})
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// register writes the fleet-identity entry of subject.
func (e *metered) register(t *testing.T, subject, device string, quarantined bool) {
	t.Helper()
	v, err := events.IdentityEntry{Device: device, Quarantined: quarantined}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.identity.Put(context.Background(), subject, v); err != nil {
		t.Fatal(err)
	}
}

// connect connects device with token, without reconnecting.
func (e *metered) connect(device, token string, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(e.ns.ClientURL(), append([]nats.Option{nats.Token(token),
		nats.CustomInboxPrefix(authcallout.InboxPrefix(device)), nats.NoReconnect(), nats.Timeout(5 * time.Second)}, opts...)...)
}

// series reads every series of g: a counter's value, a histogram's count.
// Keys are name{label="value",...}, labels sorted by name.
func series(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// moved is what changed from before to after, the key-set fetches left out
// (whether a connect fetches depends on the clock).
func moved(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 && !strings.HasPrefix(k, authcallout.MetricJWKSRefreshes) {
			out[k] = d
		}
	}
	return out
}

func authorized(result, reason string) string {
	return fmt.Sprintf("%s{reason=%q,result=%q}", authcallout.MetricAuthorizations, reason, result)
}

func timed(result string) string {
	return fmt.Sprintf("%s{result=%q}", authcallout.MetricAuthorizationDuration, result)
}

func verifyFailed(reason string) string {
	return fmt.Sprintf("%s{reason=%q}", authcallout.MetricTokenVerificationErrors, reason)
}

const revocations = authcallout.MetricRevocations + "{}"

// TestTheCalloutMetricsCountEveryAnswer: each connect moves exactly its
// series (the answer by result and reason, its duration, a failed
// verification by the verifier's reason, a revocation), and no label value
// names a device, a subject, a token or a key.
func TestTheCalloutMetricsCountEveryAnswer(t *testing.T) {
	e := newMetered(t)
	ctx := context.Background()
	now := time.Now()
	kid := e.op.SigningKeyID()
	const forgedSubject = "subject-forged-metrics"
	e.register(t, forgedSubject, "dev-forged", false)
	forged := func(edit func(map[string]any)) string {
		c := map[string]any{"iss": e.op.Issuer(), "sub": forgedSubject, "aud": []string{e.op.Audience()},
			"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}
		if edit != nil {
			edit(c)
		}
		return forge(t, c, jwa.RS256, signingKey(), kid)
	}
	// tokens and names are what no label value may contain.
	var tokens []string
	names := []string{forgedSubject, "dev-forged", kid}
	token := func(src *credential.Source) string {
		tok, err := src.IDToken(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, tok)
		names = append(names, src.Subject())
		return tok
	}
	refused := func(device, tok string) func(t *testing.T) {
		tokens = append(tokens, tok)
		return func(t *testing.T) {
			if _, err := e.connect(device, tok); !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("connect: %v, want an authorization violation", err)
			}
		}
	}
	allowedSrc := e.machine(t, "device-dev-ok")
	e.register(t, allowedSrc.Subject(), "dev-ok", false)
	quarantinedSrc := e.machine(t, "device-dev-q")
	e.register(t, quarantinedSrc.Subject(), "dev-q", true)
	unknownSrc := e.machine(t, "device-dev-unknown")
	liveSrc := e.machine(t, "device-dev-live")
	e.register(t, liveSrc.Subject(), "dev-live", false)
	names = append(names, "dev-ok", "dev-q", "dev-unknown", "dev-live")

	tests := []struct {
		name string
		act  func(t *testing.T)
		want map[string]float64
	}{
		{"an allowed device connect counts as allowed", func(t *testing.T) {
			nc, err := e.connect("dev-ok", token(allowedSrc))
			if err != nil {
				t.Fatal(err)
			}
			nc.Close()
		}, map[string]float64{authorized("allowed", "ok"): 1, timed("allowed"): 1}},
		{"a connect without a token counts as refused for no token", refused("dev-x", ""),
			map[string]float64{authorized("refused", "no_token"): 1, timed("refused"): 1, verifyFailed("no_token"): 1}},
		{"a garbage token counts as refused for a malformed token", refused("dev-x", "garbage"),
			map[string]float64{authorized("refused", "malformed_token"): 1, timed("refused"): 1, verifyFailed("malformed_token"): 1}},
		{"an expired token counts as refused for an expired token", refused("dev-forged", forged(func(c map[string]any) {
			c["iat"], c["exp"] = now.Add(-time.Hour).Unix(), now.Add(-10*time.Minute).Unix()
		})), map[string]float64{authorized("refused", "token_expired"): 1, timed("refused"): 1, verifyFailed("expired"): 1}},
		{"a token for another audience counts as refused for an invalid token", refused("dev-forged", forged(func(c map[string]any) {
			c["aud"] = []string{"another-project"}
		})), map[string]float64{authorized("refused", "token_invalid"): 1, timed("refused"): 1, verifyFailed("wrong_audience"): 1}},
		{"a token with an unknown kid counts as refused for an unknown key", refused("dev-forged",
			forge(t, map[string]any{"iss": e.op.Issuer(), "sub": forgedSubject, "aud": []string{e.op.Audience()},
				"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix()}, jwa.RS256, signingKey(), "no-such-kid")),
			map[string]float64{authorized("refused", "unknown_key"): 1, timed("refused"): 1, verifyFailed("unknown_key"): 1}},
		{"a quarantined identity counts as refused for quarantine", func(t *testing.T) { refused("dev-q", token(quarantinedSrc))(t) },
			map[string]float64{authorized("refused", "quarantined"): 1, timed("refused"): 1}},
		{"an identity without a fleet-identity entry counts as refused for an unknown identity",
			func(t *testing.T) { refused("dev-unknown", token(unknownSrc))(t) },
			map[string]float64{authorized("refused", "unknown_identity"): 1, timed("refused"): 1}},
		{"quarantining a connected device counts one revocation", func(t *testing.T) {
			closed := make(chan struct{})
			nc, err := e.connect("dev-live", token(liveSrc), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			e.register(t, liveSrc.Subject(), "dev-live", true)
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
				t.Fatal("the quarantined device is still connected after 10s")
			}
		}, map[string]float64{authorized("allowed", "ok"): 1, timed("allowed"): 1, revocations: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := series(t, e.reg)
			tc.act(t)
			// The answer is counted once sent: the client may see it first.
			var got map[string]float64
			if err := testenv.Poll(ctx, 10*time.Second, func() bool {
				got = moved(before, series(t, e.reg))
				return maps.Equal(got, tc.want)
			}); err != nil {
				t.Fatalf("the series moved by %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("the provider's keys were fetched and counted", func(t *testing.T) {
		got := series(t, e.reg)
		if ok := got[authcallout.MetricJWKSRefreshes+`{result="ok"}`]; ok < 1 {
			t.Fatalf("%d key-set fetches counted, want at least the first", int(ok))
		}
	})

	t.Run("no label value names a device, a subject, a token or a key", func(t *testing.T) {
		mfs, err := e.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		enum := regexp.MustCompile(`^[a-z_]{2,32}$`)
		forbidden := slices.Concat(names, tokens, e.secrets)
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					v := l.GetValue()
					if !enum.MatchString(v) {
						t.Errorf("%s: label %s=%q is not a bounded enum value", mf.GetName(), l.GetName(), v)
					}
					for _, f := range forbidden {
						if f != "" && strings.Contains(v, f) {
							t.Errorf("%s: label %s=%q holds a device, subject, token or key", mf.GetName(), l.GetName(), v)
						}
					}
				}
			}
		}
	})
}

// TestKeySetFetchesAreCounted: a fetch that succeeds and one that fails
// each count under their result; the failure also counts a verification
// that failed for unavailable keys.
func TestKeySetFetchesAreCounted(t *testing.T) {
	op, err := devop.New(devop.Options{SigningKey: signingKey()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
	}))
	defer down.Close()
	tests := []struct {
		name    string
		jwksURL string
		want    map[string]float64
	}{
		{"a fetch from the provider counts as ok", op.JWKSURL(),
			map[string]float64{authcallout.MetricJWKSRefreshes + `{result="ok"}`: 1}},
		{"a fetch from a failing server counts as an error", down.URL,
			map[string]float64{authcallout.MetricJWKSRefreshes + `{result="error"}`: 1, verifyFailed("keys_unavailable"): 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := authcallout.NewMetrics()
			reg := prometheus.NewRegistry()
			reg.MustRegister(m.Collectors()...)
			v, err := authcallout.NewVerifier(authcallout.VerifierOptions{Issuer: op.Issuer(), Audience: op.Audience(),
				JWKSURL: tc.jwksURL, Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			before := series(t, reg)
			// A token with a kid makes the verifier fetch the keys.
			tok := forge(t, map[string]any{"iss": op.Issuer(), "sub": "s", "aud": []string{op.Audience()},
				"iat": time.Now().Unix(), "exp": time.Now().Add(time.Minute).Unix()}, jwa.RS256, signingKey(), op.SigningKeyID())
			_, _ = v.Verify(ctx, tok)
			got := series(t, reg)
			for k, d := range tc.want {
				if got[k]-before[k] != d {
					t.Errorf("%s moved by %v, want %v", k, got[k]-before[k], d)
				}
			}
		})
	}
}

// TestAnUndecodableRequestCountsAsABadRequest: Respond counts the empty
// answer to a request that does not decode.
func TestAnUndecodableRequestCountsAsABadRequest(t *testing.T) {
	issuer, _ := nkeys.CreateAccount()
	v, err := authcallout.NewVerifier(authcallout.VerifierOptions{Issuer: "http://idp.invalid", Audience: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	m := authcallout.NewMetrics()
	reg := prometheus.NewRegistry()
	reg.MustRegister(m.Collectors()...)
	svc, err := authcallout.New(authcallout.Options{Issuer: issuer, Verifier: v, Identities: mapIdentities{}, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	before := series(t, reg)
	if resp := svc.Respond(context.Background(), []byte("not a request"), ""); resp != nil {
		t.Fatalf("answer %q, want none", resp)
	}
	want := map[string]float64{authorized("refused", "bad_request"): 1, timed("refused"): 1}
	if got := moved(before, series(t, reg)); !maps.Equal(got, want) {
		t.Fatalf("the series moved by %v, want %v", got, want)
	}
}

// TestTheCalloutRegistersItsFiveFamilies: the families, their label names
// and help, as the catalogue (docs/metrics.md) reads them; a nil Metrics
// has none and records nothing.
func TestTheCalloutRegistersItsFiveFamilies(t *testing.T) {
	fams, err := metrics.Describe(authcallout.NewMetrics().Collectors()...)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, f := range fams {
		if f.Help == "" {
			t.Errorf("%s has no help", f.Name)
		}
		got[f.Name] = f.Labels
	}
	want := map[string][]string{
		"fleet_authcallout_authorizations_total":            {"reason", "result"},
		"fleet_authcallout_authorization_duration_seconds":  {"result"},
		"fleet_authcallout_token_verification_errors_total": {"reason"},
		"fleet_authcallout_revocations_total":               nil,
		"fleet_authcallout_jwks_refreshes_total":            {"result"},
	}
	if !maps.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("families %v, want %v", got, want)
	}
	var none *authcallout.Metrics
	if c := none.Collectors(); c != nil {
		t.Fatalf("a nil Metrics has collectors %v", c)
	}
	// A service and a verifier without metrics answer all the same.
	issuer, _ := nkeys.CreateAccount()
	v, err := authcallout.NewVerifier(authcallout.VerifierOptions{Issuer: "http://idp.invalid", Audience: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := authcallout.New(authcallout.Options{Issuer: issuer, Verifier: v, Identities: mapIdentities{}})
	if err != nil {
		t.Fatal(err)
	}
	if resp := svc.Respond(context.Background(), []byte("not a request"), ""); resp != nil {
		t.Fatalf("answer %q, want none", resp)
	}
	if _, err := v.Verify(context.Background(), ""); !errors.Is(err, authcallout.ErrNoToken) {
		t.Fatalf("verify: %v, want ErrNoToken", err)
	}
}

package devop_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/zitadel/oidc/v3/pkg/client/rp"
	httphelper "github.com/zitadel/oidc/v3/pkg/http"
	"github.com/zitadel/oidc/v3/pkg/oidc"

	"github.com/nationtech/harmony-fleet/identity/devop"
)

const (
	adaPassword  = "correct-horse-battery-staple-7"
	clientSecret = "dashboard-secret-1f3c"
	// The web clients' redirect URI: the tests' browser stops there and
	// reads the code from the redirect, nothing listens on it.
	callbackURL = "http://127.0.0.1:9/auth/callback"
	logoutURL   = "http://127.0.0.1:9/signed-out"
)

// syncBuffer is a log sink safe for the provider's concurrent handlers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// webFixture is a provider with one human user and two web clients (a
// public one, "dashboard-public", and a confidential one, "dashboard"),
// whose log must never contain a password or the client secret.
type webFixture struct {
	p     *devop.Provider
	adaID string
	log   *syncBuffer
}

func startWeb(t *testing.T, o devop.Options) *webFixture {
	t.Helper()
	f := &webFixture{log: &syncBuffer{}}
	o.Logger = slog.New(slog.NewTextHandler(f.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	f.p = start(t, o)
	var err error
	if f.adaID, err = f.p.CreateHumanUser(context.Background(), "ada", adaPassword, "fleet-admin", "fleet-viewer"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []devop.WebClient{
		{ID: "dashboard", Secret: clientSecret, RedirectURIs: []string{callbackURL}, PostLogoutRedirectURIs: []string{logoutURL}},
		{ID: "dashboard-public", RedirectURIs: []string{callbackURL}},
	} {
		if err := f.p.RegisterWebClient(c); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		logged := f.log.String()
		for _, secret := range []string{adaPassword, "wrong-password-9", clientSecret} {
			if strings.Contains(logged, secret) {
				t.Errorf("the provider's log contains the secret %q:\n%s", secret, logged)
			}
		}
	})
	return f
}

// relyingParty is the zitadel/oidc relying party of a web client.
func relyingParty(t *testing.T, p *devop.Provider, clientID, secret string, opts ...rp.Option) rp.RelyingParty {
	t.Helper()
	r, err := rp.NewRelyingPartyOIDC(context.Background(), p.Issuer(), clientID, secret, callbackURL,
		[]string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// browser is a cookie-keeping HTTP client that follows redirects until one
// leaves for the clients' redirect or post-logout URI, and returns that
// redirect as the response.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: time.Minute, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if req.URL.Host == "127.0.0.1:9" {
			return http.ErrUseLastResponse
		}
		if len(via) > 10 {
			return errors.New("too many redirects")
		}
		return nil
	}}
}

type page struct {
	status int
	url    *url.URL // of the last request
	body   string
	loc    *url.URL // Location of a redirect the browser stopped at
	csp    string   // the Content-Security-Policy header
}

func do(t *testing.T, b *http.Client, req *http.Request) page {
	t.Helper()
	resp, err := b.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	pg := page{status: resp.StatusCode, url: resp.Request.URL, body: string(body), csp: resp.Header.Get("Content-Security-Policy")}
	if loc := resp.Header.Get("Location"); loc != "" {
		if pg.loc, err = resp.Request.URL.Parse(loc); err != nil {
			t.Fatal(err)
		}
	}
	return pg
}

func get(t *testing.T, b *http.Client, u string) page {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, b, req)
}

// submitLogin posts the login form the browser is on.
func submitLogin(t *testing.T, b *http.Client, form page, user, password string) page {
	t.Helper()
	id := form.url.Query().Get("authRequestID")
	if form.status != http.StatusOK || form.url.Path != "/login" || id == "" {
		t.Fatalf("expected the login form, got %d %s:\n%s", form.status, form.url, form.body)
	}
	if !strings.Contains(form.body, `value="`+id+`"`) {
		t.Fatalf("the form does not carry the auth request id %s:\n%s", id, form.body)
	}
	v := url.Values{"authRequestID": {id}, "username": {user}, "password": {password}}
	req, err := http.NewRequest(http.MethodPost, form.url.Scheme+"://"+form.url.Host+"/login", strings.NewReader(v.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return do(t, b, req)
}

// pkce returns a fresh code_verifier and its S256 challenge.
func pkce() (verifier, challenge string) {
	verifier = rand.Text() + rand.Text()
	return verifier, oidc.NewSHACodeChallenge(verifier)
}

// signIn runs the authorization request authURL through the login form as
// ada and returns the code the provider redirected to the client with.
func signIn(t *testing.T, authURL string) string {
	t.Helper()
	b := browser(t)
	done := submitLogin(t, b, get(t, b, authURL), "ada", adaPassword)
	if done.loc == nil || done.loc.String() == "" || !strings.HasPrefix(done.loc.String(), callbackURL+"?") {
		t.Fatalf("after signing in: %d %s, want a redirect to %s:\n%s", done.status, done.loc, callbackURL, done.body)
	}
	code := done.loc.Query().Get("code")
	if code == "" {
		t.Fatalf("redirect %s carries no code", done.loc)
	}
	if got := done.loc.Query().Get("state"); got != "st-1" {
		t.Fatalf("redirect state %q, want st-1", got)
	}
	return code
}

func TestAHumanSignsInThroughTheRelyingPartyAndGetsAVerifiedIDTokenWithRolesAndName(t *testing.T) {
	f := startWeb(t, devop.Options{})
	ctx := context.Background()

	// The dashboard's way: zitadel/oidc's relying party handlers with PKCE
	// state in cookies, on a loopback server of their own.
	key := make([]byte, 32)
	rand.Read(key)
	cookies := httphelper.NewCookieHandler(key, key, httphelper.WithUnsecure())
	var mux http.ServeMux
	app := httptest.NewServer(&mux)
	t.Cleanup(app.Close)
	relying, err := rp.NewRelyingPartyOIDC(ctx, f.p.Issuer(), "dashboard", clientSecret, app.URL+"/auth/callback",
		[]string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail}, rp.WithPKCE(cookies))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.RegisterWebClient(devop.WebClient{ID: "dashboard", Secret: clientSecret, RedirectURIs: []string{app.URL + "/auth/callback"}}); err != nil {
		t.Fatal(err)
	}
	tokens := make(chan *oidc.Tokens[*oidc.IDTokenClaims], 1)
	mux.Handle("/auth/login", rp.AuthURLHandler(func() string { return "st-1" }, relying))
	mux.Handle("/auth/callback", rp.CodeExchangeHandler(func(w http.ResponseWriter, _ *http.Request, tok *oidc.Tokens[*oidc.IDTokenClaims], _ string, _ rp.RelyingParty) {
		tokens <- tok
		io.WriteString(w, "signed in")
	}, relying))

	b := browser(t)
	form := get(t, b, app.URL+"/auth/login")
	done := submitLogin(t, b, form, "ada", adaPassword)
	if done.status != http.StatusOK || done.body != "signed in" {
		t.Fatalf("after signing in: %d %s:\n%s", done.status, done.url, done.body)
	}
	tok := <-tokens

	// The id_token verifies against the provider's JWKS.
	verifier := rp.NewIDTokenVerifier(f.p.Issuer(), "dashboard", rp.NewRemoteKeySet(http.DefaultClient, f.p.JWKSURL()))
	c, err := rp.VerifyIDToken[*oidc.IDTokenClaims](ctx, tok.IDToken, verifier)
	if err != nil {
		t.Fatal(err)
	}
	got := claims(t, tok.IDToken)
	want := map[string]any{
		"iss": f.p.Issuer(), "sub": f.adaID, "aud": []any{devop.DefaultAudience, "dashboard"},
		"preferred_username": "ada", "name": "ada", "email": "ada@fleet.dev.invalid",
		devop.RolesClaim: map[string]any{
			"fleet-admin":  map[string]any{"fleet-dev": "fleet-dev.localhost"},
			"fleet-viewer": map[string]any{"fleet-dev": "fleet-dev.localhost"},
		},
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			delete(got, k)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("id_token claims (-want +got):\n%s", diff)
	}
	if c.GetSubject() != f.adaID {
		t.Fatalf("verified subject %s, want %s", c.GetSubject(), f.adaID)
	}

	// userinfo answers the same claims for the access token.
	info, err := rp.Userinfo[*oidc.UserInfo](ctx, tok.AccessToken, tok.TokenType, f.adaID, relying)
	if err != nil {
		t.Fatal(err)
	}
	gotInfo := map[string]any{"sub": info.Subject, "preferred_username": info.PreferredUsername, "name": info.Name,
		"email": info.Email, "roles": info.Claims[devop.RolesClaim]}
	wantInfo := map[string]any{"sub": f.adaID, "preferred_username": "ada", "name": "ada",
		"email": "ada@fleet.dev.invalid", "roles": want[devop.RolesClaim]}
	if diff := cmp.Diff(wantInfo, gotInfo); diff != "" {
		t.Fatalf("userinfo (-want +got):\n%s", diff)
	}
}

func TestTheLoginPageIsAPlainAccessibleForm(t *testing.T) {
	f := startWeb(t, devop.Options{})
	_, challenge := pkce()
	r := relyingParty(t, f.p, "dashboard", clientSecret)
	form := get(t, browser(t), rp.AuthURL("st-1", r, rp.WithCodeChallenge(challenge)))
	if form.status != http.StatusOK {
		t.Fatalf("login page: %d\n%s", form.status, form.body)
	}
	for _, want := range []string{`<html lang="en">`, `<h1>`, `<label for="username">`, `id="username"`,
		`<label for="password">`, `id="password" name="password" type="password"`, `method="post"`} {
		if !strings.Contains(form.body, want) {
			t.Errorf("the login page lacks %s:\n%s", want, form.body)
		}
	}
	// A browser applies form-action to the redirects after the form is
	// sent: the last one goes to the client's registered redirect URI.
	if want := "form-action 'self' http://127.0.0.1:9;"; !strings.Contains(form.csp, want) {
		t.Errorf("the login page's Content-Security-Policy %q lacks %q: a browser would block the redirect to the client after sign-in", form.csp, want)
	}
	again := submitLogin(t, browser(t), form, "ada", "wrong-password-9")
	if want := "form-action 'self' http://127.0.0.1:9;"; !strings.Contains(again.csp, want) {
		t.Errorf("the form shown again after a wrong password has the Content-Security-Policy %q, lacking %q", again.csp, want)
	}
}

func TestAWrongPasswordOrUnknownUserShowsTheFormAgainWithOneErrorAndNoCode(t *testing.T) {
	for _, tc := range []struct {
		name, user, password string
	}{
		{"a wrong password", "ada", "wrong-password-9"},
		{"an unknown user", "grace", "wrong-password-9"},
		{"an empty password", "ada", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startWeb(t, devop.Options{})
			_, challenge := pkce()
			r := relyingParty(t, f.p, "dashboard", clientSecret)
			b := browser(t)
			form := get(t, b, rp.AuthURL("st-1", r, rp.WithCodeChallenge(challenge)))
			again := submitLogin(t, b, form, tc.user, tc.password)
			if again.loc != nil {
				t.Fatalf("redirected to %s, want the form again", again.loc)
			}
			if again.status != http.StatusUnauthorized || !strings.Contains(again.body, "Wrong user name or password.") ||
				!strings.Contains(again.body, `role="alert"`) || !strings.Contains(again.body, `name="password"`) {
				t.Fatalf("want the form with the error, got %d:\n%s", again.status, again.body)
			}
			if strings.Contains(again.body, tc.password) && tc.password != "" {
				t.Fatal("the page echoes the password")
			}
			// The refusal is logged (so the log the cleanup searches for the
			// password is the one the login handler writes to).
			if !strings.Contains(f.log.String(), "sign-in refused") {
				t.Fatalf("the refusal is not logged:\n%s", f.log.String())
			}
			// The same request still signs in with the right password.
			done := submitLogin(t, b, form, "ada", adaPassword)
			if done.loc == nil || done.loc.Query().Get("code") == "" {
				t.Fatalf("the right password after a wrong one: %d %v\n%s", done.status, done.loc, done.body)
			}
		})
	}
}

func TestTheAuthorizationEndpointRefusesRequestsWithoutS256PKCEOrARegisteredRedirect(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(v url.Values)
		// redirected: the refusal goes back to the (registered) redirect URI
		// as error=invalid_request; otherwise the provider answers it.
		redirected bool
	}{
		{"a request without code_challenge is refused", func(v url.Values) {
			v.Del("code_challenge")
			v.Del("code_challenge_method")
		}, true},
		{"a request with the plain method is refused", func(v url.Values) {
			v.Set("code_challenge_method", "plain")
		}, true},
		{"a request with a challenge but no method is refused", func(v url.Values) {
			v.Del("code_challenge_method")
		}, true},
		{"an unregistered redirect_uri is refused", func(v url.Values) {
			v.Set("redirect_uri", "http://127.0.0.1:9/elsewhere")
		}, false},
		{"a redirect_uri differing only by a trailing slash is refused", func(v url.Values) {
			v.Set("redirect_uri", callbackURL+"/")
		}, false},
		{"an unknown client is refused", func(v url.Values) {
			v.Set("client_id", "intruder")
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startWeb(t, devop.Options{})
			_, challenge := pkce()
			r := relyingParty(t, f.p, "dashboard-public", "")
			u, err := url.Parse(rp.AuthURL("st-1", r, rp.WithCodeChallenge(challenge)))
			if err != nil {
				t.Fatal(err)
			}
			v := u.Query()
			tc.change(v)
			u.RawQuery = v.Encode()
			got := get(t, browser(t), u.String())
			if got.url.Path == "/login" {
				t.Fatalf("reached the login page: %s", got.url)
			}
			if tc.redirected {
				if got.loc == nil || !strings.HasPrefix(got.loc.String(), callbackURL+"?") ||
					got.loc.Query().Get("error") != "invalid_request" || got.loc.Query().Get("code") != "" {
					t.Fatalf("want an invalid_request redirect to %s, got %d %v\n%s", callbackURL, got.status, got.loc, got.body)
				}
				return
			}
			if got.loc != nil || got.status < 400 {
				t.Fatalf("want a refusal answered by the provider, got %d %v\n%s", got.status, got.loc, got.body)
			}
		})
	}
}

func TestTheTokenEndpointRefusesABadCodeExchange(t *testing.T) {
	for _, tc := range []struct {
		name     string
		clientID string
		secret   string
		verifier func(right string) string
		twice    bool
	}{
		{name: "a wrong code_verifier is refused", clientID: "dashboard", secret: clientSecret,
			verifier: func(string) string { v, _ := pkce(); return v }},
		{name: "a missing code_verifier is refused for a confidential client", clientID: "dashboard", secret: clientSecret,
			verifier: func(string) string { return "" }},
		{name: "a missing code_verifier is refused for a public client", clientID: "dashboard-public",
			verifier: func(string) string { return "" }},
		{name: "a code used twice is refused", clientID: "dashboard", secret: clientSecret,
			verifier: func(right string) string { return right }, twice: true},
		{name: "a wrong client secret is refused", clientID: "dashboard", secret: "not-the-secret",
			verifier: func(right string) string { return right }},
		{name: "a missing client secret is refused", clientID: "dashboard", secret: "",
			verifier: func(right string) string { return right }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startWeb(t, devop.Options{})
			ctx := context.Background()
			verifier, challenge := pkce()
			r := relyingParty(t, f.p, tc.clientID, tc.secret)
			// The code is always obtained by the right client: only the
			// exchange differs.
			code := signIn(t, rp.AuthURL("st-1", relyingParty(t, f.p, tc.clientID, clientSecret), rp.WithCodeChallenge(challenge)))
			exchange := func() error {
				var opts []rp.CodeExchangeOpt
				if v := tc.verifier(verifier); v != "" {
					opts = append(opts, rp.WithCodeVerifier(v))
				}
				tok, err := rp.CodeExchange[*oidc.IDTokenClaims](ctx, code, r, opts...)
				if err == nil && tok.IDToken == "" {
					return errors.New("no id_token")
				}
				return err
			}
			if tc.twice {
				if err := exchange(); err != nil {
					t.Fatalf("first exchange: %v", err)
				}
			}
			err := exchange()
			if err == nil {
				t.Fatal("the exchange succeeded")
			}
			if !strings.Contains(err.Error(), "invalid_") {
				t.Fatalf("want an OAuth invalid_* error, got %v", err)
			}
		})
	}
}

func TestAFailedExchangeBurnsTheCode(t *testing.T) {
	f := startWeb(t, devop.Options{})
	verifier, challenge := pkce()
	r := relyingParty(t, f.p, "dashboard", clientSecret)
	code := signIn(t, rp.AuthURL("st-1", r, rp.WithCodeChallenge(challenge)))
	wrong, _ := pkce()
	if _, err := rp.CodeExchange[*oidc.IDTokenClaims](context.Background(), code, r, rp.WithCodeVerifier(wrong)); err == nil {
		t.Fatal("a wrong verifier was accepted")
	}
	if _, err := rp.CodeExchange[*oidc.IDTokenClaims](context.Background(), code, r, rp.WithCodeVerifier(verifier)); err == nil {
		t.Fatal("the code was accepted after a failed exchange")
	}
}

func TestARemovedUsersCodeIsRefused(t *testing.T) {
	f := startWeb(t, devop.Options{})
	ctx := context.Background()
	verifier, challenge := pkce()
	r := relyingParty(t, f.p, "dashboard", clientSecret)
	code := signIn(t, rp.AuthURL("st-1", r, rp.WithCodeChallenge(challenge)))
	if err := f.p.RemoveHumanUser(ctx, f.adaID); err != nil {
		t.Fatal(err)
	}
	if _, err := rp.CodeExchange[*oidc.IDTokenClaims](ctx, code, r, rp.WithCodeVerifier(verifier)); err == nil {
		t.Fatal("the code of a removed user was exchanged")
	}
}

func TestAClientSecretWorksInTheBodyAsWellAsInBasicAuth(t *testing.T) {
	for _, tc := range []struct {
		name  string
		style rp.Option
	}{
		// oauth2.AuthStyleInHeader is 2, AuthStyleInParams 1.
		{"client_secret_basic", rp.WithAuthStyle(2)},
		{"client_secret_post", rp.WithAuthStyle(1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startWeb(t, devop.Options{})
			verifier, challenge := pkce()
			r := relyingParty(t, f.p, "dashboard", clientSecret, tc.style)
			code := signIn(t, rp.AuthURL("st-1", r, rp.WithCodeChallenge(challenge)))
			tok, err := rp.CodeExchange[*oidc.IDTokenClaims](context.Background(), code, r, rp.WithCodeVerifier(verifier))
			if err != nil {
				t.Fatal(err)
			}
			if tok.IDTokenClaims.Subject != f.adaID {
				t.Fatalf("sub %s, want %s", tok.IDTokenClaims.Subject, f.adaID)
			}
		})
	}
}

func TestAuthRequestsAndCodesExpire(t *testing.T) {
	for _, tc := range []struct {
		name        string
		beforeLogin time.Duration
		beforeCode  time.Duration
	}{
		{name: "an auth request older than 10 minutes cannot be signed in", beforeLogin: 11 * time.Minute},
		{name: "a code older than a minute cannot be exchanged", beforeCode: 2 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			now := time.Now()
			clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
			advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
			f := startWeb(t, devop.Options{Now: clock})
			verifier, challenge := pkce()
			r := relyingParty(t, f.p, "dashboard", clientSecret)
			b := browser(t)
			form := get(t, b, rp.AuthURL("st-1", r, rp.WithCodeChallenge(challenge)))
			advance(tc.beforeLogin)
			done := submitLogin(t, b, form, "ada", adaPassword)
			if tc.beforeLogin > 0 {
				if done.loc != nil || done.status != http.StatusBadRequest || !strings.Contains(done.body, "expired") {
					t.Fatalf("want the expiry page, got %d %v\n%s", done.status, done.loc, done.body)
				}
				return
			}
			code := done.loc.Query().Get("code")
			advance(tc.beforeCode)
			if _, err := rp.CodeExchange[*oidc.IDTokenClaims](context.Background(), code, r, rp.WithCodeVerifier(verifier)); err == nil {
				t.Fatal("an expired code was accepted")
			}
		})
	}
}

func TestEndSessionRedirectsToARegisteredPostLogoutURIOnly(t *testing.T) {
	f := startWeb(t, devop.Options{})
	ctx := context.Background()
	verifier, challenge := pkce()
	r := relyingParty(t, f.p, "dashboard", clientSecret)
	code := signIn(t, rp.AuthURL("st-1", r, rp.WithCodeChallenge(challenge)))
	tok, err := rp.CodeExchange[*oidc.IDTokenClaims](ctx, code, r, rp.WithCodeVerifier(verifier))
	if err != nil {
		t.Fatal(err)
	}
	endSession := func(postLogout string) page {
		v := url.Values{"id_token_hint": {tok.IDToken}, "client_id": {"dashboard"}, "post_logout_redirect_uri": {postLogout}, "state": {"bye"}}
		return get(t, browser(t), f.p.Issuer()+"/end_session?"+v.Encode())
	}
	if got := endSession("http://127.0.0.1:9/not-registered"); got.loc != nil || got.status < 400 {
		t.Fatalf("an unregistered post_logout_redirect_uri: %d %v, want a refusal", got.status, got.loc)
	}
	got := endSession(logoutURL)
	if got.loc == nil || got.loc.String() != logoutURL+"?state=bye" {
		t.Fatalf("end_session: %d %v, want a redirect to %s?state=bye\n%s", got.status, got.loc, logoutURL, got.body)
	}
	// The session's access token no longer answers at userinfo.
	if _, err := rp.Userinfo[*oidc.UserInfo](ctx, tok.AccessToken, tok.TokenType, f.adaID, r); err == nil {
		t.Fatal("userinfo answered after end_session")
	}
}

func TestRegisterWebClientNamesTheFieldToFix(t *testing.T) {
	p := start(t, devop.Options{})
	for _, tc := range []struct {
		name string
		c    devop.WebClient
		want string
	}{
		{"a client without id is refused", devop.WebClient{RedirectURIs: []string{callbackURL}}, "WebClient.ID"},
		{"a client without redirect URIs is refused", devop.WebClient{ID: "d"}, "WebClient.RedirectURIs"},
		{"a relative redirect URI is refused", devop.WebClient{ID: "d", RedirectURIs: []string{"/cb"}}, "WebClient.RedirectURIs"},
		{"a redirect URI with a fragment is refused", devop.WebClient{ID: "d", RedirectURIs: []string{callbackURL + "#x"}}, "WebClient.RedirectURIs"},
		{"a custom-scheme post-logout URI is refused", devop.WebClient{ID: "d", RedirectURIs: []string{callbackURL}, PostLogoutRedirectURIs: []string{"app:/x"}}, "WebClient.PostLogoutRedirectURIs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.RegisterWebClient(tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestCreateHumanUserRefusesBadInputAndKeepsNamesUnique(t *testing.T) {
	ctx := context.Background()
	p := start(t, devop.Options{})
	if _, err := p.CreateMachineUser(ctx, "edge-1"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, user, password, want string
	}{
		{"an empty name is refused", "", "pw", "name is empty"},
		{"an empty password is refused", "ada", "", "password is empty"},
		{"a machine user's name is refused", "edge-1", "pw", "machine user"},
		{"a password over 72 bytes is refused", "ada", strings.Repeat("p", 73), "password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.CreateHumanUser(ctx, tc.user, tc.password)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if tc.password != "" && len(tc.password) > 2 && strings.Contains(err.Error(), tc.password) {
				t.Fatal("the error contains the password")
			}
		})
	}
	first, err := p.CreateHumanUser(ctx, "ada", "pw-1", "fleet-viewer")
	if err != nil {
		t.Fatal(err)
	}
	again, err := p.CreateHumanUser(ctx, "ada", "pw-2", "fleet-admin")
	if err != nil || again != first {
		t.Fatalf("creating ada again: %s, %v; want the same id %s", again, err, first)
	}
}

// The discovery document advertises what the dashboard's relying party
// needs: the code flow with S256 and the userinfo and end_session
// endpoints.
func TestDiscoveryAdvertisesTheCodeFlowWithS256(t *testing.T) {
	p := start(t, devop.Options{})
	d := getJSON(t, p.Issuer()+"/.well-known/openid-configuration")
	got := map[string]any{
		"methods": d["code_challenge_methods_supported"], "userinfo": d["userinfo_endpoint"] != nil,
		"end_session": d["end_session_endpoint"] != nil, "authorization": d["authorization_endpoint"] != nil,
	}
	want := map[string]any{"methods": []any{"S256"}, "userinfo": true, "end_session": true, "authorization": true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("discovery (-want +got):\n%s", diff)
	}
}

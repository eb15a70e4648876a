package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/zitadel/oidc/v3/pkg/client/rp"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"
)

// relyingParty is the OIDC client, discovered on first use: the dashboard
// starts while the provider is down and signs users in once it answers.
type relyingParty struct {
	o        OIDC
	redirect string
	mu       sync.Mutex
	// rp is the discovered client; nil until discovery succeeded. Guarded
	// by mu.
	rp rp.RelyingParty
}

type nonceKey struct{}

func (r *relyingParty) get(ctx context.Context) (rp.RelyingParty, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rp != nil {
		return r.rp, nil
	}
	scopes := append([]string{oidc.ScopeOpenID, oidc.ScopeProfile}, r.o.Scopes...)
	c, err := rp.NewRelyingPartyOIDC(ctx, r.o.Issuer, r.o.ClientID, r.o.ClientSecret, r.redirect, scopes,
		rp.WithVerifierOpts(rp.WithNonce(func(ctx context.Context) string {
			n, _ := ctx.Value(nonceKey{}).(string)
			return n
		})))
	if err != nil {
		return nil, fmt.Errorf("discover the OpenID Provider %s: %w", r.o.Issuer, err)
	}
	r.rp = c
	return c, nil
}

// handleLogin starts the authorization code flow with PKCE: a sealed
// sign-in cookie holds the state, the nonce and the code verifier; the
// browser goes to the provider.
func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) {
	if s.o.MockSignIn {
		s.render(w, r, http.StatusOK, "mocklogin", page{Title: "Sign in (mock)", Return: s.safeReturn(r.URL.Query().Get("return"))})
		return
	}
	c, err := s.rp.get(r.Context())
	if err != nil {
		s.log.Error("sign-in: the OpenID Provider does not answer", "err", err)
		s.errorPage(w, r, http.StatusBadGateway, "The identity provider does not answer", "Sign-in needs the identity provider; try again in a moment.")
		return
	}
	st := loginState{State: randomToken(), Nonce: randomToken(), Verifier: randomToken(), Return: s.safeReturn(r.URL.Query().Get("return")),
		Expires: time.Now().Add(DefaultLoginTimeout)}
	if err := s.cookies.set(w, loginCookie, st, st.Expires); err != nil {
		s.errorPage(w, r, http.StatusInternalServerError, "Sign-in failed", "The sign-in could not start.")
		return
	}
	u := rp.AuthURL(st.State, c, rp.WithCodeChallenge(oidc.NewSHACodeChallenge(st.Verifier)),
		func() []oauth2.AuthCodeOption {
			return []oauth2.AuthCodeOption{oauth2.SetAuthURLParam("nonce", st.Nonce)}
		})
	http.Redirect(w, r, u, http.StatusFound)
}

// handleCallback ends the flow: it checks the state, exchanges the code
// with the verifier, verifies the id_token (issuer, audience, signature,
// expiry, nonce) and starts a session.
func (s *Server) handleCallback(w http.ResponseWriter, r *http.Request) {
	var st loginState
	if err := s.cookies.get(r, loginCookie, &st); err != nil || time.Now().After(st.Expires) {
		s.errorPage(w, r, http.StatusBadRequest, "Sign-in expired", "The sign-in took too long or started in another browser. Sign in again.")
		return
	}
	s.cookies.clear(w, loginCookie)
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		s.log.Warn("sign-in refused by the identity provider", "error", bounded(e, 64))
		s.errorPage(w, r, http.StatusForbidden, "Sign-in refused", "The identity provider refused the sign-in ("+bounded(e, 64)+").")
		return
	}
	if !equalToken(q.Get("state"), st.State) {
		s.log.Warn("sign-in: the state does not match the sign-in cookie")
		s.errorPage(w, r, http.StatusBadRequest, "Sign-in failed", "The sign-in answer does not belong to this browser's sign-in. Sign in again.")
		return
	}
	c, err := s.rp.get(r.Context())
	if err != nil {
		s.errorPage(w, r, http.StatusBadGateway, "The identity provider does not answer", "Try again in a moment.")
		return
	}
	ctx := context.WithValue(r.Context(), nonceKey{}, st.Nonce)
	tokens, err := rp.CodeExchange[*oidc.IDTokenClaims](ctx, q.Get("code"), c, rp.WithCodeVerifier(st.Verifier))
	if err != nil {
		// The error may quote the provider's answer, never the code or
		// the tokens; it is logged, not shown.
		s.log.Warn("sign-in: the code exchange or the id_token check failed", "err", err)
		s.errorPage(w, r, http.StatusForbidden, "Sign-in failed", "The identity provider's answer could not be verified. Sign in again.")
		return
	}
	u := userOf(tokens.IDTokenClaims, s.o.Kube, s.o.OIDC.Issuer)
	if err := s.startSession(w, u); err != nil {
		s.errorPage(w, r, http.StatusInternalServerError, "Sign-in failed", "The session could not be created.")
		return
	}
	s.log.Info("signed in", "user", u.Name, "user_subject", u.Subject, "admin", u.Admin, "viewer", u.Viewer, "kube_user", u.KubeUser)
	// The sealed cookie holds what /login checked; it is checked again,
	// so a cookie sealed under an older check cannot lead elsewhere.
	seeOther(w, s.safeReturn(st.Return))
}

// handleMockLogin signs in a mock user (serve-web --mock only).
func (s *Server) handleMockLogin(w http.ResponseWriter, r *http.Request) {
	if !s.o.MockSignIn {
		http.NotFound(w, r)
		return
	}
	if !s.sameOrigin(r) {
		s.errorPage(w, r, http.StatusForbidden, "Request refused", "The request did not come from this dashboard's pages.")
		return
	}
	var u User
	switch r.PostFormValue("role") {
	case RoleAdmin:
		u = User{Subject: "mock-admin", Name: "mock-admin", Admin: true, KubeUser: "mock-admin", KubeGroups: []string{RoleAdmin}}
	case RoleViewer:
		u = User{Subject: "mock-viewer", Name: "mock-viewer", Viewer: true, KubeUser: "mock-viewer", KubeGroups: []string{RoleViewer}}
	default:
		u = User{Subject: "mock-nobody", Name: "mock-nobody"}
	}
	if err := s.startSession(w, u); err != nil {
		s.errorPage(w, r, http.StatusInternalServerError, "Sign-in failed", "The session could not be created.")
		return
	}
	s.log.Info("signed in (mock)", "user", u.Name, "admin", u.Admin)
	seeOther(w, s.safeReturn(r.PostFormValue("return")))
}

func (s *Server) startSession(w http.ResponseWriter, u User) error {
	sess := session{ID: randomToken(), User: u, CSRF: randomToken(), Expires: time.Now().Add(s.o.SessionLifetime)}
	return s.cookies.set(w, sessionCookie, sess, sess.Expires)
}

// handleLogout ends the session (a POST with the CSRF token): the cookie is
// cleared and its id revoked until it would have expired.
func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) {
	sess, ok := s.session(r)
	if ok {
		if !s.checkCSRF(w, r, sess) {
			return
		}
		s.revoked.add(sess.ID, sess.Expires)
		s.log.Info("signed out", "user", sess.User.Name, "user_subject", sess.User.Subject)
	}
	s.cookies.clear(w, sessionCookie)
	http.Redirect(w, r, "/signed-out", http.StatusSeeOther)
}

// handleSignedOut says the session ended and, with an OpenID Provider
// that offers RP-initiated logout, links to it.
func (s *Server) handleSignedOut(w http.ResponseWriter, r *http.Request) {
	p := page{Title: "Signed out"}
	if s.o.OIDC != nil {
		if c, err := s.rp.get(r.Context()); err == nil && c.GetEndSessionEndpoint() != "" {
			v := url.Values{"client_id": {s.o.OIDC.ClientID}, "post_logout_redirect_uri": {s.public.String() + "/signed-out"}}
			p.ProviderLogout = c.GetEndSessionEndpoint() + "?" + v.Encode()
		}
	}
	s.render(w, r, http.StatusOK, "signedout", p)
}

// userOf reads the user, the fleet roles and the Kubernetes identity
// (kube, for the tokens of issuer) from the id_token's claims.
func userOf(c *oidc.IDTokenClaims, kube KubeIdentity, issuer string) User {
	u := User{Subject: c.Subject, Name: c.PreferredUsername}
	if u.Name == "" {
		u.Name = c.Name
	}
	if u.Name == "" {
		u.Name = c.Subject
	}
	u.Name = bounded(u.Name, 128)
	if roles, ok := c.Claims[RolesClaim].(map[string]any); ok {
		_, u.Admin = roles[RoleAdmin]
		_, u.Viewer = roles[RoleViewer]
	}
	u.KubeUser = kubeUserOf(c, kube, issuer)
	if u.KubeUser != "" {
		for _, role := range []string{RoleAdmin, RoleViewer} {
			if (role == RoleAdmin && u.Admin) || (role == RoleViewer && u.Viewer) {
				u.KubeGroups = append(u.KubeGroups, kube.GroupsPrefix+role)
			}
		}
	}
	return u
}

// kubeUserOf is the Kubernetes user name the API server gives the token's
// user: the username claim's value after the prefix. "" when the claim is
// missing or not a string, when the claim is email and the address is not
// verified (the API server refuses such a token), or when the name is one
// the API server reserves (system:).
func kubeUserOf(c *oidc.IDTokenClaims, kube KubeIdentity, issuer string) string {
	claim := kube.claim()
	var v string
	switch claim {
	case "sub":
		v = c.Subject
	case "email":
		if !bool(c.EmailVerified) {
			return ""
		}
		v = c.Email
	case "preferred_username":
		v = c.PreferredUsername
	default:
		v, _ = c.Claims[claim].(string)
	}
	if v == "" {
		v, _ = c.Claims[claim].(string)
	}
	if v == "" {
		return ""
	}
	name := kube.prefix(issuer) + v
	if strings.HasPrefix(name, "system:") || strings.ContainsFunc(name, unicode.IsControl) || len(name) > 512 {
		return ""
	}
	return name
}

// bounded cuts s to n bytes (at a rune boundary), marking the cut.
func bounded(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

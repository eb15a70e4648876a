package devop

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// WebClient is an OpenID Connect client using the authorization code flow
// (the dashboard). PKCE with S256 is required of every client.
type WebClient struct {
	// ID is the client_id.
	ID string
	// Secret, when set, makes the client confidential: it authenticates at
	// the token endpoint with client_secret_basic or client_secret_post.
	// Empty: a public client (PKCE only).
	Secret string
	// RedirectURIs are the exact redirect_uri values the client may use
	// (http or https; no fragment). At least one.
	RedirectURIs []string
	// PostLogoutRedirectURIs are the exact post_logout_redirect_uri values
	// the end_session endpoint may redirect to.
	PostLogoutRedirectURIs []string
}

// Validate checks the client.
func (c WebClient) Validate() error {
	var errs []error
	if c.ID == "" {
		errs = append(errs, errors.New("devop: WebClient.ID is empty"))
	}
	if len(c.RedirectURIs) == 0 {
		errs = append(errs, errors.New("devop: WebClient.RedirectURIs is empty: give the client's callback URL"))
	}
	for _, u := range c.RedirectURIs {
		if err := checkClientURI(u); err != nil {
			errs = append(errs, fmt.Errorf("devop: WebClient.RedirectURIs: %w", err))
		}
	}
	for _, u := range c.PostLogoutRedirectURIs {
		if err := checkClientURI(u); err != nil {
			errs = append(errs, fmt.Errorf("devop: WebClient.PostLogoutRedirectURIs: %w", err))
		}
	}
	return errors.Join(errs...)
}

func checkClientURI(raw string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Errorf("%q is not a URL", raw)
	case u.Scheme != "http" && u.Scheme != "https", u.Host == "":
		return fmt.Errorf("%q is not an absolute http or https URL", raw)
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return fmt.Errorf("%q has a fragment", raw)
	}
	return nil
}

// RegisterWebClient adds a web client, or replaces the one with the same
// ID.
func (p *Provider) RegisterWebClient(c WebClient) error {
	if err := c.Validate(); err != nil {
		return err
	}
	wc := &webClient{
		id:             c.ID,
		confidential:   c.Secret != "",
		secret:         secretDigest(c.Secret),
		redirects:      slices.Clone(c.RedirectURIs),
		logoutRedirect: slices.Clone(c.PostLogoutRedirectURIs),
		lifetime:       p.lifetime,
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clients[c.ID] = wc
	return nil
}

func (p *Provider) webClient(id string) (*webClient, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[id]
	return c, ok
}

// webClient implements op.Client for a registered WebClient.
type webClient struct {
	id             string
	confidential   bool
	secret         [32]byte
	redirects      []string
	logoutRedirect []string
	lifetime       time.Duration
}

var _ op.Client = (*webClient)(nil)

func (c *webClient) secretMatches(secret string) bool {
	d := secretDigest(secret)
	return c.confidential && subtle.ConstantTimeCompare(d[:], c.secret[:]) == 1
}

func (c *webClient) GetID() string                       { return c.id }
func (c *webClient) RedirectURIs() []string              { return c.redirects }
func (c *webClient) PostLogoutRedirectURIs() []string    { return c.logoutRedirect }
func (c *webClient) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c *webClient) AuthMethod() oidc.AuthMethod {
	if c.confidential {
		// op also accepts the secret in the form (client_secret_post)
		// for a basic client when the provider supports post.
		return oidc.AuthMethodBasic
	}
	return oidc.AuthMethodNone
}
func (c *webClient) ResponseTypes() []oidc.ResponseType {
	return []oidc.ResponseType{oidc.ResponseTypeCode}
}
func (c *webClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeCode}
}
func (c *webClient) LoginURL(authRequestID string) string {
	return loginPath + "?authRequestID=" + url.QueryEscape(authRequestID)
}
func (c *webClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeBearer }
func (c *webClient) IDTokenLifetime() time.Duration      { return c.lifetime }

// DevMode lets registered http (not https) redirect URIs through: the
// dashboard of `fleet dev` is plain HTTP. The match stays exact.
func (c *webClient) DevMode() bool                        { return true }
func (c *webClient) IsScopeAllowed(s string) bool         { return s == RolesClaim }
func (c *webClient) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c *webClient) ClockSkew() time.Duration             { return 0 }
func (c *webClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c *webClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

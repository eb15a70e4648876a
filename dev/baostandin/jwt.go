package baostandin

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/lestrrat-go/jwx/v2/jwt"
)

// jwtConfig is auth/<mount>/config.
type jwtConfig struct {
	OIDCDiscoveryURL    string   `json:"oidc_discovery_url"`
	OIDCDiscoveryCAPEM  string   `json:"oidc_discovery_ca_pem"`
	JWKSURL             string   `json:"jwks_url"`
	JWTValidationPubKey []string `json:"jwt_validation_pubkeys"`
	BoundIssuer         string   `json:"bound_issuer"`
}

// jwtRole is auth/<mount>/role/<name>.
type jwtRole struct {
	RoleType             string         `json:"role_type"`
	BoundAudiences       []string       `json:"bound_audiences"`
	BoundSubject         string         `json:"bound_subject"`
	BoundClaims          map[string]any `json:"bound_claims"`
	BoundClaimsType      string         `json:"bound_claims_type"`
	UserClaim            string         `json:"user_claim"`
	TokenPolicies        []string       `json:"token_policies"`
	TokenTTL             int64          `json:"token_ttl"`
	TokenNoDefaultPolicy bool           `json:"token_no_default_policy"`
}

// jwtMount is one enabled JWT auth method.
type jwtMount struct {
	config  *jwtConfig
	roles   map[string]*jwtRole
	keys    jwk.Set
	issuer  string // from discovery
	fetched time.Time
}

// errLogin is a login refused for a reason the caller sees (400).
var errLogin = errors.New("login refused")

// keySet returns the keys to verify with, fetching (and caching for a
// minute) discovery and JWKS documents.
func (m *jwtMount) keySet(ctx context.Context, now time.Time) (jwk.Set, error) {
	c := m.config
	if len(c.JWTValidationPubKey) > 0 {
		set := jwk.NewSet()
		for i, pemKey := range c.JWTValidationPubKey {
			k, err := jwk.ParseKey([]byte(pemKey), jwk.WithPEM(true))
			if err != nil {
				return nil, fmt.Errorf("jwt_validation_pubkeys[%d]: %w", i, err)
			}
			if err := set.AddKey(k); err != nil {
				return nil, err
			}
		}
		return set, nil
	}
	if m.keys != nil && now.Sub(m.fetched) < time.Minute {
		return m.keys, nil
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	if c.OIDCDiscoveryCAPEM != "" {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM([]byte(c.OIDCDiscoveryCAPEM)) {
			return nil, errors.New("oidc_discovery_ca_pem holds no certificate")
		}
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	jwksURL := c.JWKSURL
	if jwksURL == "" {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.OIDCDiscoveryURL, "/")+"/.well-known/openid-configuration", nil)
		if err != nil {
			return nil, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("fetching OIDC discovery document: %w", err)
		}
		defer resp.Body.Close()
		var doc struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("fetching OIDC discovery document: status %d", resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
			return nil, fmt.Errorf("decoding OIDC discovery document: %w", err)
		}
		jwksURL, m.issuer = doc.JWKSURI, doc.Issuer
	}
	set, err := jwk.Fetch(ctx, jwksURL, jwk.WithHTTPClient(hc))
	if err != nil {
		return nil, fmt.Errorf("fetching keys: %w", err)
	}
	m.keys, m.fetched = set, now
	return set, nil
}

// login validates raw against role the way OpenBao's JWT auth does and
// returns the user claim's value.
func (m *jwtMount) login(ctx context.Context, role *jwtRole, raw string, now time.Time) (string, error) {
	if m.config == nil {
		return "", fmt.Errorf("%w: could not load configuration", errLogin)
	}
	parse := func() (jwt.Token, error) {
		set, err := m.keySet(ctx, now)
		if err != nil {
			return nil, err
		}
		return jwt.Parse([]byte(raw),
			jwt.WithKeySet(set, jws.WithInferAlgorithmFromKey(true), jws.WithRequireKid(false)),
			jwt.WithValidate(true), jwt.WithClock(jwt.ClockFunc(func() time.Time { return now })),
			jwt.WithAcceptableSkew(150*time.Second))
	}
	tok, err := parse()
	if err != nil && m.keys != nil && !m.fetched.Equal(now) {
		// Keys may have rotated since they were cached: fetch them again
		// once, as OpenBao does for an unknown key.
		m.keys = nil
		tok, err = parse()
	}
	if err != nil {
		return "", fmt.Errorf("%w: error validating token: %w", errLogin, err)
	}
	issuer := m.config.BoundIssuer
	if issuer == "" {
		issuer = m.issuer
	}
	if issuer != "" && tok.Issuer() != issuer {
		return "", fmt.Errorf("%w: error validating token: invalid issuer (iss) claim", errLogin)
	}
	switch {
	case len(role.BoundAudiences) == 0 && len(tok.Audience()) > 0:
		return "", fmt.Errorf("%w: audience claim found in JWT but no audiences bound to the role", errLogin)
	case len(role.BoundAudiences) > 0 && !slices.ContainsFunc(tok.Audience(), func(a string) bool { return slices.Contains(role.BoundAudiences, a) }):
		return "", fmt.Errorf("%w: error validating token: invalid audience (aud) claim: audience claim does not match any expected audience", errLogin)
	}
	if role.BoundSubject != "" && tok.Subject() != role.BoundSubject {
		return "", fmt.Errorf("%w: sub claim does not match bound subject", errLogin)
	}
	claims, err := tok.AsMap(ctx)
	if err != nil {
		return "", fmt.Errorf("%w: %w", errLogin, err)
	}
	if err := validateBoundClaims(role.BoundClaims, claims, role.BoundClaimsType == "glob"); err != nil {
		return "", fmt.Errorf("%w: error validating claims: %w", errLogin, err)
	}
	userClaim := role.UserClaim
	if userClaim == "" {
		userClaim = "sub"
	}
	user, ok := claims[userClaim].(string)
	if !ok || user == "" {
		return "", fmt.Errorf("%w: claim %q not found in token", errLogin, userClaim)
	}
	return user, nil
}

// validateBoundClaims checks every bound claim as OpenBao's JWT auth
// does: the token's claim (a name starting with "/" is a JSON pointer into
// the claims) must be present, be a string, a boolean or a list, and hold
// one value equal to one of the bound values (a string, a boolean or a
// list); with glob, a bound string is a pattern for string values.
func validateBoundClaims(bound, claims map[string]any, glob bool) error {
	for name, want := range bound {
		got := claimValue(claims, name)
		if got == nil {
			return fmt.Errorf("claim %q is missing", name)
		}
		gots, ok := claimList(got)
		if !ok {
			return fmt.Errorf("received claim is not a string or list: %v", got)
		}
		wants, ok := claimList(want)
		if !ok {
			return fmt.Errorf("bound claim is not a string or list: %v", want)
		}
		if !claimMatches(gots, wants, glob) {
			return fmt.Errorf("claim %q does not match any associated bound claim values", name)
		}
	}
	return nil
}

// claimValue is the claim name, or the value the JSON pointer name (a
// leading "/") points at; nil when there is none.
func claimValue(claims map[string]any, name string) any {
	if !strings.HasPrefix(name, "/") {
		return claims[name]
	}
	var cur any = claims
	for _, tok := range strings.Split(name[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[tok]
	}
	return cur
}

// claimList is v as a list: a string or a boolean is a list of one.
func claimList(v any) ([]any, bool) {
	switch v := v.(type) {
	case []any:
		return v, true
	case []string:
		out := make([]any, len(v))
		for i, s := range v {
			out[i] = s
		}
		return out, true
	case string, bool:
		return []any{v}, true
	}
	return nil, false
}

// claimMatches reports whether one of gots equals one of wants (with glob,
// matches a bound string pattern).
func claimMatches(gots, wants []any, glob bool) bool {
	for _, w := range wants {
		for _, g := range gots {
			ws, wok := w.(string)
			gs, gok := g.(string)
			if glob && wok {
				if gok && globMatch(ws, gs) {
					return true
				}
				continue
			}
			if w == g {
				return true
			}
		}
	}
	return false
}

// globMatch supports `*` anywhere in pattern, as OpenBao's glob bound
// claims do.
func globMatch(pattern, s string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == s
	}
	if !strings.HasPrefix(s, parts[0]) {
		return false
	}
	s = s[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return strings.HasSuffix(s, parts[len(parts)-1])
}

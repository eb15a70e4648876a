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
	for name, want := range role.BoundClaims {
		if !claimMatches(claims[name], want, role.BoundClaimsType == "glob") {
			return "", fmt.Errorf("%w: claim %q does not match any associated bound claim values", errLogin, name)
		}
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

// claimMatches: the token's claim (a string or a list of strings) holds one
// of the bound values (a string or a list).
func claimMatches(got, want any, glob bool) bool {
	wants := strings2(want)
	for _, g := range strings2(got) {
		for _, w := range wants {
			if g == w || (glob && globMatch(w, g)) {
				return true
			}
		}
	}
	return false
}

func strings2(v any) []string {
	switch v := v.(type) {
	case string:
		return []string{v}
	case []string:
		return v
	case []any:
		var out []string
		for _, x := range v {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
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

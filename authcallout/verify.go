package authcallout

import (
	"context"
	"crypto"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"
	"github.com/lestrrat-go/jwx/v2/jws"
	"github.com/lestrrat-go/jwx/v2/jwt"
)

// RolesClaim is the id_token claim holding project roles (Zitadel's name):
// an object whose keys are role names.
const RolesClaim = "urn:zitadel:iam:org:project:roles"

// maxTokenSize bounds the token the verifier parses.
const maxTokenSize = 16 << 10

// DefaultAlgorithms is the default signature allow-list: what Zitadel signs
// id_tokens with. none and every HMAC algorithm are refused whatever the
// list says.
var DefaultAlgorithms = []jwa.SignatureAlgorithm{jwa.RS256}

// VerifierOptions configure a Verifier.
type VerifierOptions struct {
	// Issuer is the expected iss, the OpenID Provider's issuer URL. Required.
	Issuer string
	// Audience must be one of the token's aud values (the Fleet project id).
	// Required.
	Audience string
	// JWKSURL is where the keys are. Default: the jwks_uri of the issuer's
	// discovery document.
	JWKSURL string
	// Algorithms is the allow-list. Default DefaultAlgorithms.
	Algorithms []jwa.SignatureAlgorithm
	// ClockSkew is tolerated on exp, nbf and iat. Default 30s.
	ClockSkew time.Duration
	// RefreshInterval: the key set is re-fetched when older than this.
	// Default 15 minutes.
	RefreshInterval time.Duration
	// MinRefreshInterval: a token with an unknown kid forces a re-fetch at
	// most this often (a rotation is picked up; a flood of forged kids does
	// not hammer the provider). Default 10s.
	MinRefreshInterval time.Duration
	// HTTPClient fetches discovery and keys. Default: 10 s timeout.
	HTTPClient *http.Client
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Metrics records failed verifications and key-set fetches. Optional:
	// nil records nothing.
	Metrics *Metrics
}

// Validate checks the options.
func (o VerifierOptions) Validate() error {
	var errs []error
	if o.Issuer == "" {
		errs = append(errs, errors.New("authcallout: VerifierOptions.Issuer is empty: give the OpenID Provider's issuer URL"))
	}
	if o.Audience == "" {
		errs = append(errs, errors.New("authcallout: VerifierOptions.Audience is empty: give the Fleet project id tokens must be issued for"))
	}
	for _, a := range o.Algorithms {
		if !asymmetric(a) {
			errs = append(errs, fmt.Errorf("authcallout: VerifierOptions.Algorithms: %q is not an asymmetric signature algorithm", a))
		}
	}
	if o.ClockSkew < 0 || o.RefreshInterval < 0 || o.MinRefreshInterval < 0 {
		errs = append(errs, errors.New("authcallout: VerifierOptions durations must not be negative"))
	}
	return errors.Join(errs...)
}

func asymmetric(a jwa.SignatureAlgorithm) bool {
	switch a {
	case jwa.RS256, jwa.RS384, jwa.RS512, jwa.PS256, jwa.PS384, jwa.PS512, jwa.ES256, jwa.ES384, jwa.ES512, jwa.EdDSA:
		return true
	}
	return false
}

// Claims are the verified facts of an id_token that authorization uses.
type Claims struct {
	// Subject is the sub claim: the machine user id.
	Subject string
	// Expiry is the exp claim.
	Expiry time.Time
	// Roles are the keys of the roles claim, sorted.
	Roles []string
}

// Verifier verifies id_tokens. Safe for concurrent use.
type Verifier struct {
	o   VerifierOptions
	hc  *http.Client
	now func() time.Time

	mu      sync.Mutex // guards the fields below; held during a fetch
	jwksURL string
	set     jwk.Set
	fetched time.Time
	// thumbs maps each kid of set to its key's RFC 7638 thumbprint.
	thumbs map[string]string
	// verified remembers tokens that verified, by their SHA-256, until
	// they expire or their key leaves the set (see cached).
	verified map[[sha256.Size]byte]verified
}

// verified is a token that verified: its claims and the key it verified
// with (kid and thumbprint).
type verified struct {
	claims Claims
	kid    string
	thumb  string
}

// maxVerified bounds the remembered tokens (about 200 bytes each). Only
// tokens whose signature verified are remembered, so hostile input cannot
// fill it.
const maxVerified = 1 << 17

// NewVerifier creates a Verifier. Keys are fetched on first use.
func NewVerifier(o VerifierOptions) (*Verifier, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if len(o.Algorithms) == 0 {
		o.Algorithms = DefaultAlgorithms
	}
	if o.ClockSkew == 0 {
		o.ClockSkew = 30 * time.Second
	}
	if o.RefreshInterval == 0 {
		o.RefreshInterval = 15 * time.Minute
	}
	if o.MinRefreshInterval == 0 {
		o.MinRefreshInterval = 10 * time.Second
	}
	v := &Verifier{o: o, hc: o.HTTPClient, now: o.Now, jwksURL: o.JWKSURL}
	if v.hc == nil {
		v.hc = &http.Client{Timeout: 10 * time.Second}
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v, nil
}

// Verify checks token and returns its claims. Errors wrap one of
// ErrNoToken, ErrMalformedToken, ErrAlgorithm, ErrUnknownKey,
// ErrInvalidToken or ErrJWKS, and never contain the token.
func (v *Verifier) Verify(ctx context.Context, token string) (Claims, error) {
	c, err := v.verify(ctx, token)
	if err != nil {
		v.o.Metrics.verificationFailed(err)
	}
	return c, err
}

func (v *Verifier) verify(ctx context.Context, token string) (Claims, error) {
	if token == "" {
		return Claims{}, ErrNoToken
	}
	if len(token) > maxTokenSize {
		return Claims{}, fmt.Errorf("%w: longer than %d bytes", ErrMalformedToken, maxTokenSize)
	}
	sum := sha256.Sum256([]byte(token))
	if c, ok := v.cached(sum); ok {
		return c, nil
	}
	msg, err := jws.Parse([]byte(token), jws.WithCompact())
	if err != nil {
		return Claims{}, fmt.Errorf("%w: not a compact JWS", ErrMalformedToken)
	}
	sigs := msg.Signatures()
	if len(sigs) != 1 {
		return Claims{}, fmt.Errorf("%w: %d signatures", ErrMalformedToken, len(sigs))
	}
	h := sigs[0].ProtectedHeaders()
	alg := h.Algorithm()
	if !asymmetric(alg) || !slices.Contains(v.o.Algorithms, alg) {
		return Claims{}, fmt.Errorf("%w: %q", ErrAlgorithm, alg)
	}
	kid := h.KeyID()
	if kid == "" {
		return Claims{}, fmt.Errorf("%w: no kid", ErrUnknownKey)
	}
	key, thumb, err := v.key(ctx, kid)
	if err != nil {
		return Claims{}, err
	}
	if ka := key.Algorithm(); ka != nil && ka.String() != "" && ka.String() != alg.String() {
		return Claims{}, fmt.Errorf("%w: token says %q, key %s is for %q", ErrAlgorithm, alg, kid, ka)
	}
	tok, err := jwt.Parse([]byte(token),
		jwt.WithKey(alg, key),
		jwt.WithValidate(true),
		jwt.WithIssuer(v.o.Issuer),
		jwt.WithAudience(v.o.Audience),
		jwt.WithAcceptableSkew(v.o.ClockSkew),
		jwt.WithClock(jwt.ClockFunc(v.now)),
		jwt.WithRequiredClaim(jwt.SubjectKey),
		jwt.WithRequiredClaim(jwt.ExpirationKey),
		jwt.WithRequiredClaim(jwt.IssuedAtKey),
	)
	if err != nil {
		return Claims{}, fmt.Errorf("%w: %w", ErrInvalidToken, reason(err))
	}
	c := Claims{Subject: tok.Subject(), Expiry: tok.Expiration()}
	if raw, ok := tok.Get(RolesClaim); ok {
		if m, ok := raw.(map[string]any); ok {
			for r := range m {
				c.Roles = append(c.Roles, r)
			}
			sort.Strings(c.Roles)
		}
	}
	v.remember(sum, verified{claims: c, kid: kid, thumb: thumb})
	return c, nil
}

// cached returns the claims of a token that verified before, when the
// same decision would be made again without verifying it: the token has
// not expired, the key set is not due for its periodic refresh, and the key
// the token verified with is still in the set with the same thumbprint (a
// key removed from or replaced in the JWKS, once re-fetched, no longer
// verifies a remembered token). Expiry is checked strictly (not within the
// clock skew), so a token within its skew is verified again and refused
// by the same check as a new one.
func (v *Verifier) cached(sum [sha256.Size]byte) (Claims, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	e, ok := v.verified[sum]
	if !ok {
		return Claims{}, false
	}
	now := v.now()
	thumb, known := v.thumbs[e.kid]
	if !now.Before(e.claims.Expiry) || v.set == nil || now.Sub(v.fetched) >= v.o.RefreshInterval || !known || thumb != e.thumb {
		delete(v.verified, sum)
		return Claims{}, false
	}
	c := e.claims
	c.Roles = slices.Clone(c.Roles)
	return c, true
}

// remember stores a token that verified, dropping expired entries when
// the store is full (and everything when that is not enough).
func (v *Verifier) remember(sum [sha256.Size]byte, e verified) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if e.thumb == "" || v.thumbs[e.kid] != e.thumb {
		return // no thumbprint, or the set changed while the token was verified
	}
	if v.verified == nil {
		v.verified = map[[sha256.Size]byte]verified{}
	}
	if len(v.verified) >= maxVerified {
		now := v.now()
		for k, x := range v.verified {
			if !now.Before(x.claims.Expiry) {
				delete(v.verified, k)
			}
		}
		if len(v.verified) >= maxVerified {
			clear(v.verified)
		}
	}
	v.verified[sum] = e
}

// check is a token check that failed: its value is the metric label
// (token_verification_errors_total's reason), its Error the text logged.
type check string

// The checks a token can fail after its key was found.
const (
	checkExpired       check = "expired"
	checkNotYetValid   check = "not_yet_valid"
	checkIssuer        check = "wrong_issuer"
	checkAudience      check = "wrong_audience"
	checkIssuedAt      check = "issued_in_future"
	checkRequiredClaim check = "missing_claim"
	checkClaims        check = "claim_invalid"
	checkSignature     check = "signature_invalid"
)

var checkText = map[check]string{
	checkExpired:       "expired",
	checkNotYetValid:   "not yet valid",
	checkIssuer:        "wrong issuer",
	checkAudience:      "wrong audience",
	checkIssuedAt:      "issued in the future",
	checkRequiredClaim: "a required claim is missing",
	checkClaims:        "claim validation failed",
	checkSignature:     "signature or encoding invalid",
}

func (c check) Error() string { return checkText[c] }

// reason names a failed check without quoting the token.
func reason(err error) check {
	switch {
	case errors.Is(err, jwt.ErrTokenExpired()):
		return checkExpired
	case errors.Is(err, jwt.ErrTokenNotYetValid()):
		return checkNotYetValid
	case errors.Is(err, jwt.ErrInvalidIssuer()):
		return checkIssuer
	case errors.Is(err, jwt.ErrInvalidAudience()):
		return checkAudience
	case errors.Is(err, jwt.ErrInvalidIssuedAt()):
		return checkIssuedAt
	case errors.Is(err, jwt.ErrRequiredClaim()):
		return checkRequiredClaim
	case jwt.IsValidationError(err):
		return checkClaims
	}
	return checkSignature
}

// key returns the JWKS key with kid and its thumbprint, re-fetching the
// set when it is stale, or when kid is unknown and the last fetch is older
// than MinRefreshInterval.
func (v *Verifier) key(ctx context.Context, kid string) (jwk.Key, string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	now := v.now()
	if v.set == nil || now.Sub(v.fetched) >= v.o.RefreshInterval {
		if err := v.fetch(ctx); err != nil {
			return nil, "", err
		}
	}
	if k, ok := v.set.LookupKeyID(kid); ok {
		return k, v.thumbs[kid], nil
	}
	if now.Sub(v.fetched) >= v.o.MinRefreshInterval {
		if err := v.fetch(ctx); err != nil {
			return nil, "", err
		}
		if k, ok := v.set.LookupKeyID(kid); ok {
			return k, v.thumbs[kid], nil
		}
	}
	return nil, "", fmt.Errorf("%w: kid %q", ErrUnknownKey, kid)
}

// Refresh re-fetches the key set now.
func (v *Verifier) Refresh(ctx context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.fetch(ctx)
}

// fetch fetches the key set (discovering its URL first when needed) and
// counts the attempt.
func (v *Verifier) fetch(ctx context.Context) error {
	err := v.fetchSet(ctx)
	v.o.Metrics.refreshed(err)
	return err
}

func (v *Verifier) fetchSet(ctx context.Context) error {
	if v.jwksURL == "" {
		u, err := v.discover(ctx)
		if err != nil {
			return err
		}
		v.jwksURL = u
	}
	set, err := jwk.Fetch(ctx, v.jwksURL, jwk.WithHTTPClient(v.hc))
	if err != nil {
		return fmt.Errorf("%w: fetch %s: %w", ErrJWKS, v.jwksURL, err)
	}
	thumbs := make(map[string]string, set.Len())
	for i := range set.Len() {
		k, ok := set.Key(i)
		if !ok || k.KeyID() == "" {
			continue
		}
		if _, dup := thumbs[k.KeyID()]; dup {
			continue // LookupKeyID finds the first one
		}
		tp, err := k.Thumbprint(crypto.SHA256)
		if err != nil {
			continue // such a key cannot verify a remembered token
		}
		thumbs[k.KeyID()] = string(tp)
	}
	v.set, v.fetched, v.thumbs = set, v.now(), thumbs
	return nil
}

func (v *Verifier) discover(ctx context.Context) (string, error) {
	u := v.o.Issuer + "/.well-known/openid-configuration"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", fmt.Errorf("%w: discovery: %w", ErrJWKS, err)
	}
	resp, err := v.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w: discovery: %w", ErrJWKS, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%w: discovery %s: %s", ErrJWKS, u, resp.Status)
	}
	var d struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return "", fmt.Errorf("%w: discovery %s: %w", ErrJWKS, u, err)
	}
	if d.Issuer != v.o.Issuer || d.JWKSURI == "" {
		return "", fmt.Errorf("%w: discovery %s: issuer %q (want %q), jwks_uri %q", ErrJWKS, u, d.Issuer, v.o.Issuer, d.JWKSURI)
	}
	return d.JWKSURI, nil
}

package devop

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// RolesClaim is the id_token claim holding project roles, as Zitadel names
// it: an object whose keys are role names (values map organisation id to
// domain).
const RolesClaim = "urn:zitadel:iam:org:project:roles"

// DefaultAudience is the audience every id_token carries unless
// Options.Audience says otherwise: the Fleet project.
const DefaultAudience = "harmony-fleet"

// Organisation id and domain asserted with roles.
const (
	devOrgID     = "fleet-dev"
	devOrgDomain = "fleet-dev.localhost"
)

// Options configure a Provider.
type Options struct {
	// Addr is the listen address. Default 127.0.0.1:0 (a free port).
	Addr string
	// Listener, when set, is where the provider serves, and Addr is
	// ignored: a caller that must choose the address itself (fleet dev
	// tries the port of its previous run first). The provider owns it from
	// New on: New closes it on an error, Run when it returns.
	Listener net.Listener
	// Issuer is the issuer URL. Default http://<listen address>. A
	// provider listening on all interfaces, or behind another name, must be
	// given the URL its clients reach it at: they check the id_tokens' iss
	// against it.
	Issuer string
	// Audience is the project id every id_token's aud carries (besides the
	// user id, the client). Default DefaultAudience.
	Audience string
	// TokenLifetime is the lifetime of id_tokens and access tokens.
	// Default 10 minutes.
	TokenLifetime time.Duration
	// SigningKey is the initial RS256 signing key. Default: a generated
	// 2048-bit key. Tests pass their own to forge tokens the provider would
	// never issue (expired, wrong audience) with a known key.
	SigningKey *rsa.PrivateKey
	// AdminToken enables the management API (/management/v1, the subset of
	// Zitadel's that identity/zitadel uses) for bearers of this token.
	// Empty: the management API refuses every request.
	AdminToken string
	// Logger receives request failures. Default: discard.
	Logger *slog.Logger
	// Now is the clock for key expiry. Default time.Now.
	Now func() time.Time
	// StateFile, when set, keeps the machine users, their roles and their
	// public keys across restarts: New reads it (a missing file is an
	// empty state), every change rewrites it (mode 0600, atomically). It
	// holds no private key; human users, web clients and the signing key
	// are not kept. Default: everything in memory.
	StateFile string
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.TokenLifetime < 0 {
		errs = append(errs, fmt.Errorf("devop: TokenLifetime %s is negative", o.TokenLifetime))
	}
	if o.SigningKey != nil && o.SigningKey.N.BitLen() < 2048 {
		errs = append(errs, errors.New("devop: SigningKey is shorter than 2048 bits"))
	}
	return errors.Join(errs...)
}

// Provider is a running development OpenID Provider. Create it with New,
// serve it with Run.
type Provider struct {
	issuer     string
	audience   string
	lifetime   time.Duration
	log        *slog.Logger
	now        func() time.Time
	ln         net.Listener
	handler    http.Handler
	adminToken string
	op         *op.Provider
	stateFile  string

	mu           sync.Mutex // guards the fields below
	users        map[string]*machineUser
	userNames    map[string]string // machine user name → id
	humans       map[string]*humanUser
	clients      map[string]*webClient
	authRequests map[string]*authRequest
	tokens       map[string]accessToken // human users' access tokens by id
	signing      signingKey             // current signing key
	verify       []signingKey           // every key in the JWKS, signing key first
}

// New creates a provider listening on o.Addr (or o.Listener); Run serves
// it.
func New(o Options) (*Provider, error) {
	if err := o.Validate(); err != nil {
		if o.Listener != nil {
			_ = o.Listener.Close()
		}
		return nil, err
	}
	ln := o.Listener
	if ln == nil {
		addr := o.Addr
		if addr == "" {
			addr = "127.0.0.1:0"
		}
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("devop: listen on Addr %s: %w", addr, err)
		}
	}
	p := &Provider{
		issuer:     o.Issuer,
		audience:   o.Audience,
		lifetime:   o.TokenLifetime,
		adminToken: o.AdminToken,
		log:        o.Logger,
		now:        o.Now,
		ln:         ln,
		stateFile:  o.StateFile,
		users:      map[string]*machineUser{},
		userNames:  map[string]string{},

		humans:       map[string]*humanUser{},
		clients:      map[string]*webClient{},
		authRequests: map[string]*authRequest{},
		tokens:       map[string]accessToken{},
	}
	if p.issuer == "" {
		p.issuer = "http://" + ln.Addr().String()
	}
	if p.audience == "" {
		p.audience = DefaultAudience
	}
	if p.lifetime == 0 {
		p.lifetime = 10 * time.Minute
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.now == nil {
		p.now = time.Now
	}
	if p.stateFile != "" {
		if err := p.loadState(p.stateFile); err != nil {
			ln.Close()
			return nil, err
		}
	}
	key := o.SigningKey
	if key == nil {
		var err error
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			ln.Close()
			return nil, fmt.Errorf("devop: generate signing key: %w", err)
		}
	}
	p.signing = signingKey{id: newID(), key: key}
	p.verify = []signingKey{p.signing}

	cfg := &op.Config{
		SupportedScopes: []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail},
		SupportedClaims: []string{
			RolesClaim, "sub", "iss", "aud", "exp", "iat", "auth_time", "nonce", "azp",
			"preferred_username", "name", "email", "email_verified",
		},
		CodeMethodS256:           true,
		AuthMethodPost:           true,
		DefaultLogoutRedirectURI: loggedOutPath,
	}
	if _, err := rand.Read(cfg.CryptoKey[:]); err != nil {
		ln.Close()
		return nil, fmt.Errorf("devop: crypto key: %w", err)
	}
	prov, err := op.NewProvider(cfg, &storage{p: p}, op.StaticIssuer(p.issuer), op.WithAllowInsecure())
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("devop: %w", err)
	}
	p.op = prov
	srv := &server{LegacyServer: op.NewLegacyServer(prov, *op.DefaultEndpoints), p: p}
	mux := http.NewServeMux()
	mux.Handle("/management/v1/", p.managementHandler())
	login := p.loginHandler()
	mux.Handle(loginPath, login)
	mux.Handle(loggedOutPath, login)
	mux.Handle("/", op.RegisterLegacyServer(srv, op.AuthorizeCallbackHandler(prov)))
	p.handler = mux
	return p, nil
}

// Issuer is the issuer URL (also the base URL of every endpoint).
func (p *Provider) Issuer() string { return p.issuer }

// JWKSURL is the URL of the provider's JSON Web Key Set.
func (p *Provider) JWKSURL() string { return p.issuer + op.DefaultEndpoints.JwksURI.Relative() }

// Audience is the project audience every id_token carries.
func (p *Provider) Audience() string { return p.audience }

// TokenLifetime is the lifetime of issued tokens.
func (p *Provider) TokenLifetime() time.Duration { return p.lifetime }

// Handler is the provider's HTTP handler (discovery, JWKS, authorization
// with its login page, token, userinfo, end_session, the management API).
func (p *Provider) Handler() http.Handler { return p.handler }

// Run serves the provider until ctx ends, then shuts the HTTP server down
// and returns nil. The listener is closed when Run returns.
func (p *Provider) Run(ctx context.Context) error {
	hs := &http.Server{Handler: p.handler, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(p.ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("devop: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := hs.Shutdown(sctx)
	<-errc
	if err != nil {
		return fmt.Errorf("devop: shutdown: %w", err)
	}
	return nil
}

// RotateSigningKey makes key (a generated one when nil) the signing key. The
// previous keys stay in the JWKS so tokens they signed still verify; keep
// at most keep previous keys (keep < 0: all).
func (p *Provider) RotateSigningKey(key *rsa.PrivateKey, keep int) (kid string, err error) {
	if key == nil {
		if key, err = rsa.GenerateKey(rand.Reader, 2048); err != nil {
			return "", fmt.Errorf("devop: generate signing key: %w", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signing = signingKey{id: newID(), key: key}
	prev := p.verify
	if keep >= 0 && len(prev) > keep {
		prev = prev[:keep]
	}
	p.verify = append([]signingKey{p.signing}, prev...)
	return p.signing.id, nil
}

// SigningKeyID is the kid of the current signing key.
func (p *Provider) SigningKeyID() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.signing.id
}

// signingKey implements op.SigningKey and op.Key.
type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k signingKey) Algorithm() jose.SignatureAlgorithm          { return jose.RS256 }
func (k signingKey) Use() string                                 { return "sig" }
func (k signingKey) ID() string                                  { return k.id }

// Key is the private key for signing; publicKey wraps it for the JWKS.
func (k signingKey) Key() any { return k.key }

type publicKey struct{ signingKey }

func (k publicKey) Key() any { return &k.key.PublicKey }

// server overrides three methods of op's LegacyServer. The JWT-profile
// grant: op returns only an access token for it, Zitadel also returns an
// id_token when scope openid is asked for, and Fleet needs that id_token.
// Authorize and CodeExchange: op checks PKCE only when the client sends
// it (or is public); this provider requires S256 PKCE of every client.
type server struct {
	*op.LegacyServer
	p *Provider
}

// JWTProfile verifies the assertion against the user's registered keys,
// issues an (opaque) access token and, for scope openid, an id_token.
func (s *server) JWTProfile(ctx context.Context, r *op.Request[oidc.JWTProfileGrantRequest]) (*op.Response, error) {
	prov := s.p.op
	tr, err := op.VerifyJWTAssertion(ctx, r.Data.Assertion, prov.JWTProfileVerifier(ctx))
	if err != nil {
		s.p.log.Info("jwt-profile grant refused", "err", err)
		return nil, oidc.ErrInvalidGrant().WithParent(err).WithDescription("assertion invalid")
	}
	tr.Scopes, err = prov.Storage().ValidateJWTProfileScopes(ctx, tr.Issuer, r.Data.Scope)
	if err != nil {
		return nil, err
	}
	resp, err := op.CreateJWTTokenResponse(ctx, tr, prov)
	if err != nil {
		return nil, err
	}
	if slices.Contains(tr.Scopes, oidc.ScopeOpenID) {
		req := &idTokenRequest{subject: tr.Subject, audience: []string{s.p.audience}, scopes: tr.Scopes, authTime: s.p.now()}
		resp.IDToken, err = op.CreateIDToken(ctx, op.IssuerFromContext(ctx), req, s.p.lifetime, resp.AccessToken, "", prov.Storage(), jwtProfileClient{id: tr.Subject, lifetime: s.p.lifetime})
		if err != nil {
			return nil, err
		}
	}
	return op.NewResponse(resp), nil
}

// Authorize refuses an authorization request without a code_challenge or
// with a method other than S256, then lets op store it and redirect to the
// login page. op has already checked the redirect_uri, so the refusal goes
// back to the client as an error redirect.
func (s *server) Authorize(ctx context.Context, r *op.ClientRequest[oidc.AuthRequest]) (*op.Redirect, error) {
	if r.Data.CodeChallenge == "" {
		return nil, oidc.ErrInvalidRequest().WithDescription("code_challenge is required: use PKCE with code_challenge_method S256")
	}
	if r.Data.CodeChallengeMethod != oidc.CodeChallengeMethodS256 {
		return nil, oidc.ErrInvalidRequest().WithDescription("code_challenge_method must be S256")
	}
	return s.LegacyServer.Authorize(ctx, r)
}

// CodeExchange verifies the code_verifier of every client (op's skips it
// for a confidential client that sends none), then lets op issue the
// tokens. The code is redeemed (unusable) by the first attempt, whatever
// its outcome.
func (s *server) CodeExchange(ctx context.Context, r *op.ClientRequest[oidc.AccessTokenRequest]) (*op.Response, error) {
	prov := s.p.op
	authReq, err := op.AuthRequestByCode(ctx, prov.Storage(), r.Data.Code)
	if err != nil {
		return nil, err
	}
	if r.Data.CodeVerifier == "" {
		return nil, oidc.ErrInvalidRequest().WithDescription("code_verifier required")
	}
	if err := op.AuthorizeCodeChallenge(r.Data.CodeVerifier, authReq.GetCodeChallenge()); err != nil {
		return nil, err
	}
	if r.Client.GetID() != authReq.GetClientID() {
		return nil, oidc.ErrInvalidGrant().WithDescription("code was issued to another client")
	}
	if r.Data.RedirectURI != authReq.GetRedirectURI() {
		return nil, oidc.ErrInvalidGrant().WithDescription("redirect_uri does not correspond")
	}
	if _, ok := s.p.human(authReq.GetSubject()); !ok {
		return nil, oidc.ErrInvalidGrant().WithDescription("the user was removed")
	}
	resp, err := op.CreateTokenResponse(ctx, authReq, r.Client, prov, true, r.Data.Code, "")
	if err != nil {
		return nil, err
	}
	return op.NewResponse(resp), nil
}

// idTokenRequest implements op.IDTokenRequest for a JWT-profile grant.
type idTokenRequest struct {
	subject  string
	audience []string
	scopes   []string
	authTime time.Time
}

func (r *idTokenRequest) GetAMR() []string       { return []string{"pwd"} }
func (r *idTokenRequest) GetAudience() []string  { return r.audience }
func (r *idTokenRequest) GetAuthTime() time.Time { return r.authTime }
func (r *idTokenRequest) GetClientID() string    { return r.subject }
func (r *idTokenRequest) GetScopes() []string    { return r.scopes }
func (r *idTokenRequest) GetSubject() string     { return r.subject }

// jwtProfileClient is the op.Client a machine user acts as in the grant.
type jwtProfileClient struct {
	id       string
	lifetime time.Duration
}

func (c jwtProfileClient) GetID() string                       { return c.id }
func (c jwtProfileClient) RedirectURIs() []string              { return nil }
func (c jwtProfileClient) PostLogoutRedirectURIs() []string    { return nil }
func (c jwtProfileClient) ApplicationType() op.ApplicationType { return op.ApplicationTypeWeb }
func (c jwtProfileClient) AuthMethod() oidc.AuthMethod         { return oidc.AuthMethodPrivateKeyJWT }
func (c jwtProfileClient) ResponseTypes() []oidc.ResponseType  { return nil }
func (c jwtProfileClient) GrantTypes() []oidc.GrantType {
	return []oidc.GrantType{oidc.GrantTypeBearer}
}
func (c jwtProfileClient) LoginURL(string) string               { return "" }
func (c jwtProfileClient) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeBearer }
func (c jwtProfileClient) IDTokenLifetime() time.Duration       { return c.lifetime }
func (c jwtProfileClient) DevMode() bool                        { return false }
func (c jwtProfileClient) IsScopeAllowed(string) bool           { return false }
func (c jwtProfileClient) IDTokenUserinfoClaimsAssertion() bool { return false }
func (c jwtProfileClient) ClockSkew() time.Duration             { return 0 }
func (c jwtProfileClient) RestrictAdditionalIdTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}
func (c jwtProfileClient) RestrictAdditionalAccessTokenScopes() func([]string) []string {
	return func(s []string) []string { return s }
}

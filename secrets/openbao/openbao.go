// Package openbao is Fleet's OpenBao client, on the real
// github.com/openbao/openbao/api/v2: JWT login with an OIDC id_token, KV
// version 2 reads and writes, transit signing (sign, public keys) for
// image signatures, and the few administration calls Fleet makes (ACL
// policies, JWT roles, the transit engine and its keys). It also owns the
// device's view of OpenBao: DeviceSecrets resolves secret_env references
// and reads device pull credentials for the agent.
//
// The client never reads the environment (no BAO_ADDR, VAULT_TOKEN or
// similar): everything comes from Config. Errors name paths, never values
// or tokens.
//
// Any package may import it: the agent binary (device secrets), the
// operator (the pull-secret policy sync), the harmony SDK and `fleet dev`
// do. It links no Kubernetes code.
package openbao

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/openbao/openbao/api/v2"
)

// Defaults for Config.
const (
	DefaultJWTMount = "jwt"
	DefaultKVMount  = "secret"
)

// Config locates an OpenBao server and the engines Fleet uses.
type Config struct {
	// Address is the server URL, e.g. https://bao.example:8200.
	Address string
	// JWTMount is the path of the JWT auth method. Default "jwt".
	JWTMount string
	// Role is the JWT auth role to log in with.
	Role string
	// KVMount is the path of the KV version 2 engine. Default "secret".
	KVMount string
	// HTTPClient carries TLS settings; default a client with a 30 s timeout.
	HTTPClient *http.Client
}

// Typed errors; every error of the package wraps one of them or a
// transport error (a transport error that may pass, ErrUnavailable too).
var (
	// ErrNotFound: no secret (or no live version of it) at the path.
	ErrNotFound = errors.New("openbao: secret not found")
	// ErrPermissionDenied: the token's policies do not allow the call, or
	// the token is invalid or expired (OpenBao answers 403).
	ErrPermissionDenied = errors.New("openbao: permission denied")
	// ErrLogin: the login was refused (bad token, role or audience).
	ErrLogin = errors.New("openbao: login refused")
	// ErrConfig: the Config is unusable.
	ErrConfig = errors.New("openbao: invalid configuration")
	// ErrUnavailable: the server could not answer now (connection refused
	// or reset, a timeout, a 5xx such as 503 while sealed or on standby):
	// the same call may succeed later.
	ErrUnavailable = errors.New("openbao: server unavailable")
)

// unavailable reports whether err is a transient failure to reach the
// server: a 5xx answer, a transport error (failed dial, refused or reset
// connection, connection closed mid-answer) or a timeout. A TLS
// verification failure is not one: retrying does not change it.
func unavailable(err error) bool {
	var re *api.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode >= 500
	}
	var op *net.OpError
	var ne net.Error
	return errors.As(err, &op) || (errors.As(err, &ne) && ne.Timeout()) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}

// Client is a logged-in (or token-holding) OpenBao client. Safe for
// concurrent use.
type Client struct {
	cfg Config
	api *api.Client

	mu      sync.Mutex
	expires time.Time // zero: no token, or one without expiry
	hasTok  bool
}

// New returns a client without a token; call Login.
func New(cfg Config) (*Client, error) {
	if cfg.Address == "" {
		return nil, fmt.Errorf("%w: the OpenBao address is empty: set it (e.g. https://bao.example:8200)", ErrConfig)
	}
	if cfg.JWTMount == "" {
		cfg.JWTMount = DefaultJWTMount
	}
	if cfg.KVMount == "" {
		cfg.KVMount = DefaultKVMount
	}
	cfg.JWTMount, cfg.KVMount = strings.Trim(cfg.JWTMount, "/"), strings.Trim(cfg.KVMount, "/")
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	c, err := api.NewClient(&api.Config{Address: cfg.Address, HttpClient: hc, DisableEnvironment: true, MaxRetries: 2, Timeout: hc.Timeout})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	c.ClearToken()
	return &Client{cfg: cfg, api: c}, nil
}

// NewWithToken returns a client that uses token (an administrator's, or
// one obtained elsewhere).
func NewWithToken(cfg Config, token string) (*Client, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if token == "" {
		return nil, fmt.Errorf("%w: the OpenBao token is empty", ErrConfig)
	}
	c.api.SetToken(token)
	c.hasTok = true
	return c, nil
}

// Config returns the client's configuration with defaults applied.
func (c *Client) Config() Config { return c.cfg }

// Login exchanges jwt (an OIDC id_token) for a token with the configured
// role.
func (c *Client) Login(ctx context.Context, jwt string) error {
	if c.cfg.Role == "" {
		return fmt.Errorf("%w: no JWT role configured: set the OpenBao role", ErrConfig)
	}
	// A login request carries no token.
	lc, err := c.api.Clone()
	if err != nil {
		return fmt.Errorf("openbao: login: %w", err)
	}
	lc.ClearToken()
	sec, err := lc.Logical().WriteWithContext(ctx, "auth/"+c.cfg.JWTMount+"/login", map[string]any{"role": c.cfg.Role, "jwt": jwt})
	if err != nil {
		var re *api.ResponseError
		if errors.As(err, &re) && (re.StatusCode == http.StatusBadRequest || re.StatusCode == http.StatusForbidden) {
			return fmt.Errorf("%w: role %q at auth/%s: %s", ErrLogin, c.cfg.Role, c.cfg.JWTMount, strings.Join(re.Errors, "; "))
		}
		if unavailable(err) {
			return fmt.Errorf("%w: login with role %q at auth/%s: %w", ErrUnavailable, c.cfg.Role, c.cfg.JWTMount, err)
		}
		return fmt.Errorf("openbao: login with role %q at auth/%s: %w", c.cfg.Role, c.cfg.JWTMount, err)
	}
	if sec == nil || sec.Auth == nil || sec.Auth.ClientToken == "" {
		return fmt.Errorf("%w: role %q: the response holds no token", ErrLogin, c.cfg.Role)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.api.SetToken(sec.Auth.ClientToken)
	c.hasTok = true
	c.expires = time.Time{}
	if sec.Auth.LeaseDuration > 0 {
		c.expires = time.Now().Add(time.Duration(sec.Auth.LeaseDuration) * time.Second)
	}
	return nil
}

// LoggedIn reports whether the client holds a token that is not within
// margin of its expiry.
func (c *Client) LoggedIn(margin time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hasTok && (c.expires.IsZero() || time.Until(c.expires) > margin)
}

// forget drops the token (after a 403 that may mean it was revoked).
func (c *Client) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hasTok = false
	c.api.ClearToken()
}

// classify maps the client's errors to the package's typed errors.
func classify(op, path string, err error) error {
	var re *api.ResponseError
	switch {
	case errors.Is(err, api.ErrSecretNotFound):
		return fmt.Errorf("%w: %s", ErrNotFound, path)
	case errors.As(err, &re) && re.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w: %s %s", ErrPermissionDenied, op, path)
	case errors.As(err, &re) && re.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s", ErrNotFound, path)
	case unavailable(err) && errors.As(err, &re):
		return fmt.Errorf("%w: %s %s: status %d: %s", ErrUnavailable, op, path, re.StatusCode, strings.Join(re.Errors, "; "))
	case unavailable(err):
		return fmt.Errorf("%w: %s %s: %w", ErrUnavailable, op, path, err)
	case errors.As(err, &re):
		return fmt.Errorf("openbao: %s %s: status %d: %s", op, path, re.StatusCode, strings.Join(re.Errors, "; "))
	}
	return fmt.Errorf("openbao: %s %s: %w", op, path, err)
}

// Read returns the data of the latest version of the KV v2 secret at path
// (relative to the KV mount).
func (c *Client) Read(ctx context.Context, path string) (map[string]any, error) {
	full := c.cfg.KVMount + "/data/" + path
	s, err := c.api.KVv2(c.cfg.KVMount).Get(ctx, path)
	if err != nil {
		return nil, classify("read", full, err)
	}
	if s.Data == nil {
		return nil, fmt.Errorf("%w: %s (its latest version is deleted)", ErrNotFound, full)
	}
	return s.Data, nil
}

// Write stores data as a new version of the KV v2 secret at path.
func (c *Client) Write(ctx context.Context, path string, data map[string]any) error {
	if _, err := c.api.KVv2(c.cfg.KVMount).Put(ctx, path, data); err != nil {
		return classify("write", c.cfg.KVMount+"/data/"+path, err)
	}
	return nil
}

// WriteCAS stores data only when the secret's current version is version
// (0: only when it does not exist yet).
func (c *Client) WriteCAS(ctx context.Context, path string, data map[string]any, version int) error {
	if _, err := c.api.KVv2(c.cfg.KVMount).Put(ctx, path, data, api.WithCheckAndSet(version)); err != nil {
		return classify("write", c.cfg.KVMount+"/data/"+path, err)
	}
	return nil
}

// PutPolicy creates or replaces the ACL policy name (HCL).
func (c *Client) PutPolicy(ctx context.Context, name, hcl string) error {
	if err := c.api.Sys().PutPolicyWithContext(ctx, name, hcl); err != nil {
		return classify("write", "sys/policies/acl/"+name, err)
	}
	return nil
}

// Policy returns the HCL of the ACL policy name.
func (c *Client) Policy(ctx context.Context, name string) (string, error) {
	s, err := c.api.Logical().ReadWithContext(ctx, "sys/policies/acl/"+name)
	if err != nil {
		return "", classify("read", "sys/policies/acl/"+name, err)
	}
	if s == nil || s.Data == nil {
		return "", fmt.Errorf("%w: sys/policies/acl/%s", ErrNotFound, name)
	}
	p, _ := s.Data["policy"].(string)
	return p, nil
}

// DeletePolicy removes the ACL policy name.
func (c *Client) DeletePolicy(ctx context.Context, name string) error {
	if err := c.api.Sys().DeletePolicyWithContext(ctx, name); err != nil {
		return classify("delete", "sys/policies/acl/"+name, err)
	}
	return nil
}

// JWTRole is the part of a JWT auth role Fleet sets.
type JWTRole struct {
	// BoundAudiences: the id_token's aud must hold one of them.
	BoundAudiences []string
	// BoundSubject, when set: the id_token's sub must equal it.
	BoundSubject string
	// BoundClaims, when not nil: for each claim, the id_token's value (a
	// string or a list) must hold one of the listed values; an empty list
	// admits no token. A group's role binds "sub" to its devices' machine
	// user ids. Matched as strings (bound_claims_type "string").
	BoundClaims map[string][]string
	// UserClaim names the claim that identifies the user. Default "sub".
	UserClaim string
	// Policies are the token policies of a login.
	Policies []string
	// TTL of a login's token; zero: the server's default.
	TTL time.Duration
}

// PutJWTRole creates or updates a role of the JWT auth method.
func (c *Client) PutJWTRole(ctx context.Context, name string, r JWTRole) error {
	if r.UserClaim == "" {
		r.UserClaim = "sub"
	}
	body := map[string]any{
		"role_type": "jwt", "bound_audiences": r.BoundAudiences, "user_claim": r.UserClaim,
		"token_policies": r.Policies, "bound_subject": r.BoundSubject,
	}
	if r.TTL > 0 {
		body["token_ttl"] = int64(r.TTL.Seconds())
	}
	if r.BoundClaims != nil {
		claims := map[string]any{}
		for k, v := range r.BoundClaims {
			claims[k] = append([]string{}, v...)
		}
		body["bound_claims"], body["bound_claims_type"] = claims, "string"
	}
	path := "auth/" + c.cfg.JWTMount + "/role/" + name
	if _, err := c.api.Logical().WriteWithContext(ctx, path, body); err != nil {
		return classify("write", path, err)
	}
	return nil
}

// ConfigureJWT enables (when not yet enabled) the JWT auth method and
// points it at an OpenID Provider's discovery document. caPEM (optional)
// is the CA that signs the provider's TLS certificate.
func (c *Client) ConfigureJWT(ctx context.Context, discoveryURL, caPEM string) error {
	err := c.api.Sys().EnableAuthWithOptionsWithContext(ctx, c.cfg.JWTMount, &api.EnableAuthOptions{Type: "jwt"})
	if err != nil && !strings.Contains(err.Error(), "path is already in use") {
		return classify("write", "sys/auth/"+c.cfg.JWTMount, err)
	}
	body := map[string]any{"oidc_discovery_url": discoveryURL}
	if caPEM != "" {
		body["oidc_discovery_ca_pem"] = caPEM
	}
	path := "auth/" + c.cfg.JWTMount + "/config"
	if _, err := c.api.Logical().WriteWithContext(ctx, path, body); err != nil {
		return classify("write", path, err)
	}
	return nil
}

// ErrNoRole: the JWT auth role does not exist.
var ErrNoRole = errors.New("openbao: no such JWT role")

// readRole returns the data of a JWT auth role.
func (c *Client) readRole(ctx context.Context, name string) (map[string]any, error) {
	path := "auth/" + c.cfg.JWTMount + "/role/" + name
	s, err := c.api.Logical().ReadWithContext(ctx, path)
	if err != nil {
		if errors.Is(classify("read", path, err), ErrNotFound) {
			return nil, fmt.Errorf("%w: %s", ErrNoRole, path)
		}
		return nil, classify("read", path, err)
	}
	if s == nil || s.Data == nil {
		return nil, fmt.Errorf("%w: %s", ErrNoRole, path)
	}
	return s.Data, nil
}

// JWTRolePolicies returns the token policies of a JWT auth role.
func (c *Client) JWTRolePolicies(ctx context.Context, name string) ([]string, error) {
	data, err := c.readRole(ctx, name)
	if err != nil {
		return nil, err
	}
	var out []string
	if list, ok := data["token_policies"].([]any); ok {
		for _, p := range list {
			if p, ok := p.(string); ok {
				out = append(out, p)
			}
		}
	}
	return out, nil
}

// SetJWTRolePolicies replaces the token policies of an existing JWT auth
// role and leaves its bindings (audiences, subject, claims) as they are.
// OpenBao re-applies the defaults of role_type ("oidc") and
// bound_claims_type ("string") on every write that omits them, so both are
// read and sent back with the policies.
func (c *Client) SetJWTRolePolicies(ctx context.Context, name string, policies []string) error {
	data, err := c.readRole(ctx, name)
	if err != nil {
		return err
	}
	if policies == nil {
		policies = []string{}
	}
	body := map[string]any{"token_policies": policies}
	for _, k := range []string{"role_type", "bound_claims_type"} {
		if v, ok := data[k].(string); ok && v != "" {
			body[k] = v
		}
	}
	path := "auth/" + c.cfg.JWTMount + "/role/" + name
	if _, err := c.api.Logical().WriteWithContext(ctx, path, body); err != nil {
		return classify("write", path, err)
	}
	return nil
}

// AddJWTRoleBoundClaimValues adds values to the bound values of claim of
// an existing JWT auth role (bound_claims; a value already there stays
// once) and leaves everything else of the role as it is, role_type and
// bound_claims_type sent back as SetJWTRolePolicies does. Two writers
// adding at once may lose one's values: one writer at a time.
func (c *Client) AddJWTRoleBoundClaimValues(ctx context.Context, name, claim string, values ...string) error {
	data, err := c.readRole(ctx, name)
	if err != nil {
		return err
	}
	bound := map[string]any{}
	if m, ok := data["bound_claims"].(map[string]any); ok {
		maps.Copy(bound, m)
	}
	var list []string
	switch v := bound[claim].(type) {
	case string:
		list = []string{v}
	case []any:
		for _, x := range v {
			if s, ok := x.(string); ok {
				list = append(list, s)
			}
		}
	}
	for _, v := range values {
		if !slices.Contains(list, v) {
			list = append(list, v)
		}
	}
	if list == nil {
		list = []string{}
	}
	bound[claim] = list
	body := map[string]any{"bound_claims": bound}
	for _, k := range []string{"role_type", "bound_claims_type"} {
		if v, ok := data[k].(string); ok && v != "" {
			body[k] = v
		}
	}
	path := "auth/" + c.cfg.JWTMount + "/role/" + name
	if _, err := c.api.Logical().WriteWithContext(ctx, path, body); err != nil {
		return classify("write", path, err)
	}
	return nil
}

// JWTRoles lists the roles of the JWT auth method.
func (c *Client) JWTRoles(ctx context.Context) ([]string, error) {
	path := "auth/" + c.cfg.JWTMount + "/role"
	s, err := c.api.Logical().ListWithContext(ctx, path)
	if err != nil {
		if errors.Is(classify("list", path, err), ErrNotFound) {
			return nil, nil
		}
		return nil, classify("list", path, err)
	}
	if s == nil || s.Data == nil {
		return nil, nil
	}
	var out []string
	if keys, ok := s.Data["keys"].([]any); ok {
		for _, k := range keys {
			if k, ok := k.(string); ok {
				out = append(out, k)
			}
		}
	}
	return out, nil
}

// HTTPClientWithCA returns an HTTP client that trusts the CA certificates
// in the PEM file caFile (for an OpenBao with a private CA).
func HTTPClientWithCA(caFile string) (*http.Client, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: CA file: %w", ErrConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrConfig, caFile)
	}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}, nil
}

// CreateToken creates a child token with policies and ttl (an
// administrator's call, e.g. to hand a service exactly one policy).
func (c *Client) CreateToken(ctx context.Context, policies []string, ttl time.Duration) (string, error) {
	sec, err := c.api.Auth().Token().CreateWithContext(ctx, &api.TokenCreateRequest{Policies: policies, TTL: ttl.String()})
	if err != nil {
		return "", classify("write", "auth/token/create", err)
	}
	if sec == nil || sec.Auth == nil || sec.Auth.ClientToken == "" {
		return "", errors.New("openbao: auth/token/create: the response holds no token")
	}
	return sec.Auth.ClientToken, nil
}

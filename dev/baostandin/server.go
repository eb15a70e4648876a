package baostandin

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure a Server.
type Options struct {
	// Now is the clock (token expiry, JWT validation). Default time.Now.
	Now func() time.Time
}

// Server is an in-memory OpenBao stand-in. It is an http.Handler; Start
// serves it on a loopback port for a test. Safe for concurrent use.
type Server struct {
	now  func() time.Time
	root string
	url  string

	mu       sync.Mutex
	kv       map[string]*kvMount // mount path (no slashes) → engine
	transit  map[string]*transitMount
	jwt      map[string]*jwtMount // auth mount path → method
	policies map[string]*policy
	tokens   map[string]*token
	requests int
}

// token is an issued client token.
type token struct {
	accessor    string
	policies    []string
	meta        map[string]string
	displayName string
	issued      time.Time
	expires     time.Time // zero: never (the root token)
	root        bool
}

// New returns a Server with a root token and a KV v2 engine at secret/,
// as an OpenBao dev server starts.
func New(o Options) *Server {
	if o.Now == nil {
		o.Now = time.Now
	}
	s := &Server{
		now:      o.Now,
		root:     "s." + randomID(24),
		kv:       map[string]*kvMount{"secret": newKVMount()},
		transit:  map[string]*transitMount{},
		jwt:      map[string]*jwtMount{},
		policies: map[string]*policy{},
		tokens:   map[string]*token{},
	}
	s.tokens[s.root] = &token{accessor: randomID(12), policies: []string{"root"}, root: true, displayName: "root", issued: o.Now()}
	return s
}

// Start serves a new Server on a loopback port until the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s := New(Options{})
	hs := httptest.NewServer(s)
	tb.Cleanup(hs.Close)
	s.url = hs.URL
	return s
}

// URL is the address Start serves on ("" for a Server from New).
func (s *Server) URL() string { return s.url }

// RootToken is the root token: every capability on every path.
func (s *Server) RootToken() string { return s.root }

// Requests is how many API requests the server has answered.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Revoke invalidates every token except the root token, as if they had
// expired.
func (s *Server) Revoke() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, t := range s.tokens {
		if !t.root {
			delete(s.tokens, k)
		}
	}
}

// apiError is an OpenBao error response.
type apiError struct {
	status int
	msgs   []string
}

func (e *apiError) Error() string { return strings.Join(e.msgs, "; ") }

func fail(status int, msgs ...string) *apiError {
	if msgs == nil {
		msgs = []string{}
	}
	return &apiError{status: status, msgs: msgs}
}

var errDenied = fail(http.StatusForbidden, "permission denied")

// reply is a successful response: data, auth, or no content.
type reply struct {
	data      any
	auth      any
	noContent bool
	lease     int64
}

// ServeHTTP answers /v1/ requests.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rep, err := s.serve(r)
	w.Header().Set("Content-Type", "application/json")
	var ae *apiError
	if errors.As(err, &ae) {
		w.WriteHeader(ae.status)
		_ = json.NewEncoder(w).Encode(map[string]any{"errors": ae.msgs})
		return
	}
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(map[string]any{"errors": []string{err.Error()}})
		return
	}
	if rep.noContent {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	_ = json.NewEncoder(w).Encode(map[string]any{
		"request_id":     randomUUID(),
		"lease_id":       "",
		"renewable":      false,
		"lease_duration": rep.lease,
		"data":           rep.data,
		"wrap_info":      nil,
		"warnings":       nil,
		"auth":           rep.auth,
	})
}

// operation is the request's method in OpenBao's terms.
func operation(r *http.Request) string {
	switch r.Method {
	case http.MethodGet:
		if r.URL.Query().Get("list") == "true" {
			return "list"
		}
		return "read"
	case "LIST":
		return "list"
	case http.MethodPost, http.MethodPut:
		return "write"
	case http.MethodDelete:
		return "delete"
	}
	return ""
}

func (s *Server) serve(r *http.Request) (reply, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	path, ok := strings.CutPrefix(r.URL.Path, "/v1/")
	if !ok {
		return reply{}, fail(http.StatusNotFound)
	}
	path = strings.Trim(path, "/")
	op := operation(r)
	if op == "" {
		return reply{}, fail(http.StatusMethodNotAllowed, "unsupported operation")
	}
	var body map[string]any
	if op == "write" {
		b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return reply{}, fail(http.StatusBadRequest, err.Error())
		}
		if len(b) > 0 {
			if err := json.Unmarshal(b, &body); err != nil {
				return reply{}, fail(http.StatusBadRequest, "failed to parse JSON input: "+err.Error())
			}
		}
	}
	if body == nil {
		body = map[string]any{}
	}

	// Login needs no token.
	if mount, ok := strings.CutSuffix(path, "/login"); ok && strings.HasPrefix(mount, "auth/") && op == "write" {
		if m := s.jwt[strings.TrimPrefix(mount, "auth/")]; m != nil {
			return s.login(r, m, body)
		}
	}
	tok, err := s.authenticate(r)
	if err != nil {
		return reply{}, err
	}
	switch {
	case path == "auth/token/create" && op == "write":
		return s.createToken(tok, body)
	case path == "auth/token/lookup-self":
		return s.lookupSelf(r, tok)
	case strings.HasPrefix(path, "sys/policies/acl/"):
		return s.policyOp(tok, path, op, body)
	case strings.HasPrefix(path, "sys/mounts/"):
		return s.mountOp(tok, path, op, body)
	case strings.HasPrefix(path, "sys/auth/"):
		return s.authMountOp(tok, path, op, body)
	case strings.HasPrefix(path, "auth/"):
		return s.jwtOp(tok, path, op, body)
	}
	mount, rest, _ := strings.Cut(path, "/")
	if kv := s.kv[mount]; kv != nil {
		return s.kvOp(tok, kv, mount, rest, op, body, r)
	}
	if tm := s.transit[mount]; tm != nil {
		return s.transitOp(tok, tm, mount, rest, op, body)
	}
	return reply{}, fail(http.StatusNotFound, fmt.Sprintf("no handler for route %q. route entry not found.", path))
}

func (s *Server) authenticate(r *http.Request) (*token, error) {
	raw := r.Header.Get("X-Vault-Token")
	if raw == "" {
		raw = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if raw == "" {
		return nil, fail(http.StatusForbidden, "permission denied")
	}
	t := s.tokens[raw]
	if t == nil {
		return nil, fail(http.StatusForbidden, "permission denied", "invalid token")
	}
	if !t.expires.IsZero() && !s.now().Before(t.expires) {
		delete(s.tokens, raw)
		return nil, fail(http.StatusForbidden, "permission denied", "invalid token")
	}
	return t, nil
}

// can reports whether t may do capability on path.
func (s *Server) can(t *token, path, capability string) bool {
	if t.root {
		return true
	}
	var ps []*policy
	for _, name := range t.policies {
		if p := s.policies[name]; p != nil {
			ps = append(ps, p)
		}
	}
	return allowed(ps, path, capability)
}

// writeCap is create for a new object, update for an existing one.
func writeCap(exists bool) string {
	if exists {
		return "update"
	}
	return "create"
}

func (s *Server) lookupSelf(r *http.Request, t *token) (reply, error) {
	if operation(r) != "read" {
		return reply{}, fail(http.StatusMethodNotAllowed, "unsupported operation")
	}
	ttl := int64(0)
	expire := any(nil)
	if !t.expires.IsZero() {
		ttl = int64(t.expires.Sub(s.now()).Seconds())
		expire = t.expires.UTC().Format(time.RFC3339Nano)
	}
	return reply{data: map[string]any{
		"accessor": t.accessor, "policies": t.policies, "meta": t.meta,
		"display_name": t.displayName, "ttl": ttl, "expire_time": expire,
		"issue_time": t.issued.UTC().Format(time.RFC3339Nano), "renewable": !t.root, "type": "service",
	}}, nil
}

// createToken is auth/token/create: a child token with the given policies
// (a subset of the caller's unless the caller is root) and ttl.
func (s *Server) createToken(t *token, body map[string]any) (reply, error) {
	if !s.can(t, "auth/token/create", "update") {
		return reply{}, errDenied
	}
	policies := stringList(body["policies"])
	for _, p := range policies {
		if !t.root && !slices.Contains(t.policies, p) {
			return reply{}, fail(http.StatusBadRequest, "child policies must be subset of parent")
		}
	}
	ttl := int64((768 * time.Hour).Seconds())
	if v, ok := body["ttl"]; ok {
		var err error
		if ttl, err = seconds(v); err != nil {
			return reply{}, fail(http.StatusBadRequest, err.Error())
		}
	}
	if nd, _ := body["no_default_policy"].(bool); !nd && !slices.Contains(policies, "default") {
		policies = append(policies, "default")
	}
	slices.Sort(policies)
	now := s.now()
	id := "s." + randomID(24)
	nt := &token{accessor: randomID(12), policies: policies, displayName: "token", issued: now, expires: now.Add(time.Duration(ttl) * time.Second)}
	s.tokens[id] = nt
	return reply{auth: map[string]any{
		"client_token": id, "accessor": nt.accessor, "policies": policies, "token_policies": policies,
		"lease_duration": ttl, "renewable": true, "token_type": "service", "orphan": false,
	}}, nil
}

func (s *Server) policyOp(t *token, path, op string, body map[string]any) (reply, error) {
	name := strings.TrimPrefix(path, "sys/policies/acl/")
	if name == "" || strings.Contains(name, "/") {
		return reply{}, fail(http.StatusBadRequest, "policy name must be one path segment")
	}
	if name == "root" && op != "read" {
		return reply{}, fail(http.StatusBadRequest, "cannot update \"root\" policy")
	}
	// OpenBao has no existence check on this path: a write is "update".
	cap := map[string]string{"read": "read", "delete": "delete", "write": "update"}[op]
	if cap == "" || !s.can(t, path, cap) {
		return reply{}, errDenied
	}
	switch op {
	case "read":
		p := s.policies[name]
		if p == nil {
			return reply{}, fail(http.StatusNotFound)
		}
		return reply{data: map[string]any{"name": name, "policy": p.raw}}, nil
	case "delete":
		delete(s.policies, name)
		return reply{noContent: true}, nil
	}
	text, _ := body["policy"].(string)
	if text == "" {
		return reply{}, fail(http.StatusBadRequest, "'policy' parameter not supplied or empty")
	}
	p, err := parsePolicy(name, text)
	if err != nil {
		return reply{}, fail(http.StatusBadRequest, err.Error())
	}
	s.policies[name] = p
	return reply{noContent: true}, nil
}

func (s *Server) mountOp(t *token, path, op string, body map[string]any) (reply, error) {
	mount := strings.Trim(strings.TrimPrefix(path, "sys/mounts/"), "/")
	if op != "write" || !s.can(t, path, "update") || !s.can(t, path, "sudo") {
		return reply{}, errDenied
	}
	if s.kv[mount] != nil || s.jwt[mount] != nil || s.transit[mount] != nil {
		return reply{}, fail(http.StatusBadRequest, fmt.Sprintf("path is already in use at %s/", mount))
	}
	typ, _ := body["type"].(string)
	if typ == "transit" {
		s.transit[mount] = newTransitMount()
		return reply{noContent: true}, nil
	}
	version := ""
	if o, ok := body["options"].(map[string]any); ok {
		version = fmt.Sprint(o["version"])
	}
	if !(typ == "kv" && version == "2") && typ != "kv-v2" {
		return reply{}, fail(http.StatusBadRequest, "the OpenBao stand-in supports only KV version 2 (type kv, options.version 2) and transit engines")
	}
	s.kv[mount] = newKVMount()
	return reply{noContent: true}, nil
}

func (s *Server) authMountOp(t *token, path, op string, body map[string]any) (reply, error) {
	mount := strings.Trim(strings.TrimPrefix(path, "sys/auth/"), "/")
	if op != "write" || !s.can(t, path, "update") || !s.can(t, path, "sudo") {
		return reply{}, errDenied
	}
	if s.jwt[mount] != nil {
		return reply{}, fail(http.StatusBadRequest, fmt.Sprintf("path is already in use at %s/", mount))
	}
	if typ, _ := body["type"].(string); typ != "jwt" {
		return reply{}, fail(http.StatusBadRequest, "the OpenBao stand-in supports only the jwt auth method")
	}
	s.jwt[mount] = &jwtMount{roles: map[string]*jwtRole{}}
	return reply{noContent: true}, nil
}

func (s *Server) jwtOp(t *token, path, op string, body map[string]any) (reply, error) {
	rest := strings.TrimPrefix(path, "auth/")
	var m *jwtMount
	var sub string
	for name, jm := range s.jwt {
		if after, ok := strings.CutPrefix(rest, name+"/"); ok {
			m, sub = jm, after
			break
		}
	}
	if m == nil {
		return reply{}, fail(http.StatusNotFound, fmt.Sprintf("no handler for route %q. route entry not found.", path))
	}
	switch {
	case sub == "config":
		switch op {
		case "read":
			if !s.can(t, path, "read") {
				return reply{}, errDenied
			}
			if m.config == nil {
				return reply{}, fail(http.StatusNotFound)
			}
			return reply{data: m.config}, nil
		case "write":
			if !s.can(t, path, "update") { // no existence check in OpenBao
				return reply{}, errDenied
			}
			var c jwtConfig
			if err := remarshal(body, &c); err != nil {
				return reply{}, fail(http.StatusBadRequest, err.Error())
			}
			n := 0
			for _, set := range []bool{c.OIDCDiscoveryURL != "", c.JWKSURL != "", len(c.JWTValidationPubKey) > 0} {
				if set {
					n++
				}
			}
			if n != 1 {
				return reply{}, fail(http.StatusBadRequest, "exactly one of 'jwt_validation_pubkeys', 'jwks_url' or 'oidc_discovery_url' must be set")
			}
			m.config, m.keys = &c, nil
			return reply{noContent: true}, nil
		}
	case strings.HasPrefix(sub, "role/"):
		name := strings.TrimPrefix(sub, "role/")
		if name == "" || strings.Contains(name, "/") {
			return reply{}, fail(http.StatusBadRequest, "role name must be one path segment")
		}
		cur := m.roles[name]
		capName := map[string]string{"read": "read", "delete": "delete", "write": writeCap(cur != nil)}[op]
		if capName == "" || !s.can(t, path, capName) {
			return reply{}, errDenied
		}
		switch op {
		case "read":
			if cur == nil {
				return reply{}, fail(http.StatusNotFound)
			}
			return reply{data: cur}, nil
		case "delete":
			delete(m.roles, name)
			return reply{noContent: true}, nil
		}
		role, err := decodeRole(cur, body)
		if err != nil {
			return reply{}, fail(http.StatusBadRequest, err.Error())
		}
		m.roles[name] = role
		return reply{noContent: true}, nil
	case sub == "role" && op == "list":
		if !s.can(t, path+"/", "list") { // OpenBao checks a LIST on the path with a trailing slash
			return reply{}, errDenied
		}
		keys := make([]string, 0, len(m.roles))
		for k := range m.roles {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		return reply{data: map[string]any{"keys": keys}}, nil
	}
	return reply{}, fail(http.StatusNotFound, fmt.Sprintf("no handler for route %q. route entry not found.", path))
}

// decodeRole applies the fields of body to a copy of cur (a new role when
// nil), accepting OpenBao's flexible input: comma-separated strings for
// lists and durations ("1h") or seconds for TTLs.
func decodeRole(cur *jwtRole, body map[string]any) (*jwtRole, error) {
	r := &jwtRole{}
	if cur != nil {
		c := *cur
		r = &c
	}
	// As OpenBao does, on every write (an update too): a missing role_type
	// is "oidc" and a missing bound_claims_type is "string".
	if _, ok := body["role_type"]; !ok {
		r.RoleType = "oidc"
	}
	if _, ok := body["bound_claims_type"]; !ok {
		r.BoundClaimsType = "string"
	}
	for k, v := range body {
		var err error
		switch k {
		case "role_type":
			r.RoleType, _ = v.(string)
		case "bound_audiences":
			r.BoundAudiences = stringList(v)
		case "bound_subject":
			r.BoundSubject, _ = v.(string)
		case "bound_claims":
			m, ok := v.(map[string]any)
			if !ok && v != nil {
				err = errors.New("bound_claims must be an object")
			}
			r.BoundClaims = m
		case "bound_claims_type":
			r.BoundClaimsType, _ = v.(string)
			if r.BoundClaimsType != "string" && r.BoundClaimsType != "glob" {
				err = fmt.Errorf("invalid 'bound_claims_type': %q", r.BoundClaimsType)
			}
		case "user_claim":
			r.UserClaim, _ = v.(string)
		case "token_policies", "policies":
			r.TokenPolicies = stringList(v)
		case "token_ttl", "ttl":
			r.TokenTTL, err = seconds(v)
		case "token_no_default_policy":
			r.TokenNoDefaultPolicy, _ = v.(bool)
		default:
			err = fmt.Errorf("the OpenBao stand-in does not implement role field %q", k)
		}
		if err != nil {
			return nil, err
		}
	}
	switch r.RoleType {
	case "jwt":
	case "oidc":
		return nil, errors.New("'allowed_redirect_uris' must be set if 'role_type' is 'oidc' or unspecified")
	default:
		return nil, fmt.Errorf("invalid 'role_type': %s", r.RoleType)
	}
	if r.UserClaim == "" {
		return nil, errors.New("a user claim must be defined on the role")
	}
	if len(r.BoundAudiences) == 0 && r.BoundSubject == "" && len(r.BoundClaims) == 0 {
		return nil, errors.New("must have at least one bound constraint when creating a role")
	}
	return r, nil
}

func (s *Server) login(r *http.Request, m *jwtMount, body map[string]any) (reply, error) {
	roleName, _ := body["role"].(string)
	raw, _ := body["jwt"].(string)
	if raw == "" {
		return reply{}, fail(http.StatusBadRequest, "missing token")
	}
	role := m.roles[roleName]
	if role == nil {
		return reply{}, fail(http.StatusBadRequest, fmt.Sprintf("role %q could not be found", roleName))
	}
	now := s.now()
	// Fetching keys may take a moment; the lock is held, which is
	// acceptable for a stand-in.
	user, err := m.login(r.Context(), role, raw, now)
	if err != nil {
		return reply{}, fail(http.StatusBadRequest, strings.TrimPrefix(err.Error(), errLogin.Error()+": "))
	}
	ttl := role.TokenTTL
	if ttl == 0 {
		ttl = int64((768 * time.Hour).Seconds())
	}
	policies := slices.Clone(role.TokenPolicies)
	if !role.TokenNoDefaultPolicy && !slices.Contains(policies, "default") {
		policies = append(policies, "default")
	}
	slices.Sort(policies)
	id := "s." + randomID(24)
	t := &token{
		accessor: randomID(12), policies: policies, meta: map[string]string{"role": roleName},
		displayName: "jwt-" + user, issued: now, expires: now.Add(time.Duration(ttl) * time.Second),
	}
	s.tokens[id] = t
	return reply{auth: map[string]any{
		"client_token": id, "accessor": t.accessor, "policies": policies, "token_policies": policies,
		"metadata": t.meta, "lease_duration": ttl, "renewable": true, "entity_id": "", "token_type": "service", "orphan": true,
	}}, nil
}

func remarshal(in any, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func stringList(v any) []string {
	if s, ok := v.(string); ok {
		var out []string
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
		return out
	}
	list, _ := claimList(v)
	var out []string
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func seconds(v any) (int64, error) {
	switch v := v.(type) {
	case float64:
		return int64(v), nil
	case string:
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			return n, nil
		}
		d, err := time.ParseDuration(v)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q", v)
		}
		return int64(d.Seconds()), nil
	}
	return 0, fmt.Errorf("invalid duration %v", v)
}

func randomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

func randomUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

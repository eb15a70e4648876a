package baostandin

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwt"
)

func TestPolicyMatchingFollowsOpenBaoRules(t *testing.T) {
	p, err := parsePolicy("p", `
path "secret/data/exact" { capabilities = ["read"] }
path "secret/data/glob/*" { capabilities = ["read", "list"] }
path "secret/data/glob/denied" { capabilities = ["deny"] }
path "secret/data/+/plus" { capabilities = ["update"] }
path "secret/data/pre*" { capabilities = ["read"] }
path "secret/data/legacy" { policy = "write" }
`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		path string
		cap  string
		want bool
	}{
		{"an exact path grants its capability", "secret/data/exact", "read", true},
		{"an exact path grants nothing else", "secret/data/exact", "update", false},
		{"an exact path does not match a longer one", "secret/data/exact/more", "read", false},
		{"a trailing glob matches deeper paths", "secret/data/glob/a/b", "read", true},
		{"a more specific deny wins over a glob", "secret/data/glob/denied", "read", false},
		{"a plus matches one segment", "secret/data/x/plus", "update", true},
		{"a plus does not match two segments", "secret/data/x/y/plus", "update", false},
		{"a glob matches a name prefix", "secret/data/prefix", "read", true},
		{"an unmatched path is denied", "secret/data/other", "read", false},
		{"the legacy policy string grants its capabilities", "secret/data/legacy", "update", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := allowed([]*policy{p}, tc.path, tc.cap); got != tc.want {
				t.Fatalf("allowed(%s, %s) = %v, want %v", tc.path, tc.cap, got, tc.want)
			}
		})
	}
}

func TestPolicyParsingRefusesWhatOpenBaoRefuses(t *testing.T) {
	for name, text := range map[string]string{
		"an unknown capability":   `path "a" { capabilities = ["reed"] }`,
		"a star in the middle":    `path "a/*/b" { capabilities = ["read"] }`,
		"broken HCL":              `path "a" { capabilities = [`,
		"a key it does not model": `path "a" { capabilities = ["update"] allowed_parameters = { "x" = [] } }`,
		"a top-level key":         `name = "p"`,
		"an unknown legacy value": `path "a" { policy = "all" }`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parsePolicy("p", text); err == nil {
				t.Fatal("parsed")
			}
		})
	}
}

// call makes one API request and returns the status and decoded body.
func call(t *testing.T, h http.Handler, method, path, token string, body any) (int, map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	if body != nil {
		_ = json.NewEncoder(&buf).Encode(body)
	}
	req := httptest.NewRequest(method, path, &buf)
	if token != "" {
		req.Header.Set("X-Vault-Token", token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &out)
	return rec.Code, out
}

func TestJWTLoginChecksSignatureExpiryAudienceAndIssuer(t *testing.T) {
	key, _ := rsa.GenerateKey(rand.Reader, 2048)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pub := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	now := time.Now()
	s := New(Options{Now: func() time.Time { return now }})
	root := s.RootToken()
	for _, step := range []struct {
		path string
		body any
	}{
		{"/v1/sys/auth/jwt", map[string]any{"type": "jwt"}},
		{"/v1/auth/jwt/config", map[string]any{"jwt_validation_pubkeys": []string{pub}, "bound_issuer": "https://idp"}},
		{"/v1/auth/jwt/role/r", map[string]any{"role_type": "jwt", "bound_audiences": "fleet", "user_claim": "sub", "token_policies": []string{"p"}, "token_ttl": "1m"}},
	} {
		if code, out := call(t, s, http.MethodPost, step.path, root, step.body); code != http.StatusNoContent {
			t.Fatalf("%s: %d %v", step.path, code, out)
		}
	}
	sign := func(k *rsa.PrivateKey, mut func(jwt.Token)) string {
		tok := jwt.New()
		_ = tok.Set(jwt.IssuerKey, "https://idp")
		_ = tok.Set(jwt.SubjectKey, "device-1")
		_ = tok.Set(jwt.AudienceKey, []string{"fleet"})
		_ = tok.Set(jwt.IssuedAtKey, now)
		_ = tok.Set(jwt.ExpirationKey, now.Add(time.Hour))
		if mut != nil {
			mut(tok)
		}
		b, err := jwt.Sign(tok, jwt.WithKey(jwa.RS256, k))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	tests := []struct {
		name string
		jwt  string
		want int
	}{
		{"a valid token logs in", sign(key, nil), http.StatusOK},
		{"a token signed by another key is refused", sign(other, nil), http.StatusBadRequest},
		{"an expired token is refused", sign(key, func(t jwt.Token) { _ = t.Set(jwt.ExpirationKey, now.Add(-time.Hour)) }), http.StatusBadRequest},
		{"a token for another audience is refused", sign(key, func(t jwt.Token) { _ = t.Set(jwt.AudienceKey, []string{"other"}) }), http.StatusBadRequest},
		{"a token from another issuer is refused", sign(key, func(t jwt.Token) { _ = t.Set(jwt.IssuerKey, "https://evil") }), http.StatusBadRequest},
		{"garbage is refused", "not-a-jwt", http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out := call(t, s, http.MethodPost, "/v1/auth/jwt/login", "", map[string]any{"role": "r", "jwt": tc.jwt})
			if code != tc.want {
				t.Fatalf("status %d, want %d: %v", code, tc.want, out)
			}
		})
	}

	_, out := call(t, s, http.MethodPost, "/v1/auth/jwt/login", "", map[string]any{"role": "r", "jwt": sign(key, nil)})
	tok := out["auth"].(map[string]any)["client_token"].(string)
	if code, _ := call(t, s, http.MethodGet, "/v1/auth/token/lookup-self", tok, nil); code != http.StatusOK {
		t.Fatalf("lookup-self with a fresh token: %d", code)
	}
	now = now.Add(2 * time.Minute) // past the role's 1m TTL
	if code, _ := call(t, s, http.MethodGet, "/v1/auth/token/lookup-self", tok, nil); code != http.StatusForbidden {
		t.Fatalf("lookup-self with an expired token: %d, want 403", code)
	}
}

func TestAnUpdateWithoutRoleTypeIsRefusedAsOpenBaoDoes(t *testing.T) {
	s := New(Options{})
	root := s.RootToken()
	call(t, s, http.MethodPost, "/v1/sys/auth/jwt", root, map[string]any{"type": "jwt"})
	if code, out := call(t, s, http.MethodPost, "/v1/auth/jwt/role/r", root, map[string]any{
		"role_type": "jwt", "bound_audiences": "fleet", "user_claim": "sub", "bound_claims_type": "glob", "bound_claims": map[string]any{"g": "a*"}}); code != http.StatusNoContent {
		t.Fatalf("create: %d %v", code, out)
	}
	if code, _ := call(t, s, http.MethodPost, "/v1/auth/jwt/role/r", root, map[string]any{"token_policies": []string{"p"}}); code != http.StatusBadRequest {
		t.Fatalf("an update of token_policies alone: %d, want 400 (role_type falls back to oidc)", code)
	}
	if code, _ := call(t, s, http.MethodPost, "/v1/auth/jwt/role/r", root, map[string]any{"token_policies": []string{"p"}, "role_type": "jwt"}); code != http.StatusNoContent {
		t.Fatalf("an update with role_type: %d", code)
	}
	_, out := call(t, s, http.MethodGet, "/v1/auth/jwt/role/r", root, nil)
	if got := out["data"].(map[string]any)["bound_claims_type"]; got != "string" {
		t.Fatalf("bound_claims_type after an update that omitted it = %v, want the default string", got)
	}
}

func TestListIsCheckedOnThePathWithATrailingSlash(t *testing.T) {
	s := New(Options{})
	root := s.RootToken()
	call(t, s, http.MethodPost, "/v1/secret/data/apps/a", root, map[string]any{"data": map[string]any{"k": "v"}})
	p, err := parsePolicy("lister", `path "secret/metadata/apps/*" { capabilities = ["list"] }`)
	if err != nil {
		t.Fatal(err)
	}
	s.policies["lister"] = p
	tok := "s.lister"
	s.tokens[tok] = &token{policies: []string{"lister"}}
	if code, out := call(t, s, "LIST", "/v1/secret/metadata/apps", tok, nil); code != http.StatusOK {
		t.Fatalf("LIST secret/metadata/apps with a policy on secret/metadata/apps/*: %d %v", code, out)
	}
}

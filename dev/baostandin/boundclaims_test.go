package baostandin

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwt"
	"github.com/openbao/openbao/api/v2"
)

// loginRefusal is what a refused login answered, as the real client
// reports it ("" status 0: logged in).
type loginRefusal struct {
	Status int
	Errors []string
}

// TestBoundClaimsAreMatchedAsOpenBaoMatchesThem logs in through the real
// OpenBao client to roles with bound_claims: a login passes when, for every
// bound claim, one of the token's values (a string, a boolean or a list)
// equals one of the bound values; a claim name starting with "/" is a JSON
// pointer. A refusal is OpenBao's: 400 and "error validating claims: …".
func TestBoundClaimsAreMatchedAsOpenBaoMatchesThem(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&key.PublicKey)
	pub := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	s := New(Options{})
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	ctx := context.Background()
	admin, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	admin.SetToken(s.RootToken())
	for _, step := range []struct {
		path string
		body map[string]any
	}{
		{"sys/auth/jwt", map[string]any{"type": "jwt"}},
		{"auth/jwt/config", map[string]any{"jwt_validation_pubkeys": []string{pub}, "bound_issuer": "https://idp"}},
		{"auth/jwt/role/group-lab", map[string]any{"role_type": "jwt", "bound_audiences": "fleet", "user_claim": "sub",
			"bound_claims": map[string]any{"groups": []string{"lab", "edge"}}}},
		{"auth/jwt/role/acme", map[string]any{"role_type": "jwt", "bound_audiences": "fleet", "user_claim": "sub",
			"bound_claims": map[string]any{"/org/name": "acme", "verified": true}}},
	} {
		if _, err := admin.Logical().WriteWithContext(ctx, step.path, step.body); err != nil {
			t.Fatalf("%s: %v", step.path, err)
		}
	}
	sign := func(claims map[string]any) string {
		tok := jwt.New()
		_ = tok.Set(jwt.IssuerKey, "https://idp")
		_ = tok.Set(jwt.SubjectKey, "device-1")
		_ = tok.Set(jwt.AudienceKey, []string{"fleet"})
		_ = tok.Set(jwt.IssuedAtKey, time.Now())
		_ = tok.Set(jwt.ExpirationKey, time.Now().Add(time.Hour))
		for k, v := range claims {
			_ = tok.Set(k, v)
		}
		b, err := jwt.Sign(tok, jwt.WithKey(jwa.RS256, key))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	refused := func(msg string) loginRefusal {
		return loginRefusal{Status: http.StatusBadRequest, Errors: []string{msg}}
	}
	tests := []struct {
		name   string
		role   string
		claims map[string]any
		want   loginRefusal
	}{
		{"a list claim holding one bound value logs in", "group-lab", map[string]any{"groups": []string{"other", "lab"}}, loginRefusal{}},
		{"a string claim equal to a bound value logs in", "group-lab", map[string]any{"groups": "edge"}, loginRefusal{}},
		{"a list claim holding no bound value is refused", "group-lab", map[string]any{"groups": []string{"other", "labs"}},
			refused(`error validating claims: claim "groups" does not match any associated bound claim values`)},
		{"a token without the claim is refused", "group-lab", nil,
			refused(`error validating claims: claim "groups" is missing`)},
		{"a JSON pointer names a nested claim, and a boolean matches a boolean", "acme",
			map[string]any{"org": map[string]any{"name": "acme"}, "verified": true}, loginRefusal{}},
		{"a nested claim of another value is refused", "acme", map[string]any{"org": map[string]any{"name": "evil"}, "verified": true},
			refused(`error validating claims: claim "/org/name" does not match any associated bound claim values`)},
		{"a boolean claim of the other value is refused", "acme", map[string]any{"org": map[string]any{"name": "acme"}, "verified": false},
			refused(`error validating claims: claim "verified" does not match any associated bound claim values`)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := api.NewClient(&api.Config{Address: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			c.ClearToken()
			var got loginRefusal
			sec, err := c.Logical().WriteWithContext(ctx, "auth/jwt/login", map[string]any{"role": tc.role, "jwt": sign(tc.claims)})
			var re *api.ResponseError
			switch {
			case errors.As(err, &re):
				got = loginRefusal{Status: re.StatusCode, Errors: re.Errors}
			case err != nil:
				t.Fatal(err)
			case sec == nil || sec.Auth == nil || sec.Auth.ClientToken == "":
				t.Fatalf("login answered no token: %+v", sec)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("login to role %s (-want +got):\n%s", tc.role, diff)
			}
		})
	}
}

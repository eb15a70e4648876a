package devop_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
)

func start(t *testing.T, o devop.Options) *devop.Provider {
	t.Helper()
	p, err := devop.New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return p
}

func claims(t *testing.T, tok string) map[string]any {
	t.Helper()
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("not a JWS: %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func getJSON(t *testing.T, url string) map[string]any {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDiscoveryAdvertisesTheJWTProfileGrantAndKeys(t *testing.T) {
	p := start(t, devop.Options{})
	d := getJSON(t, p.Issuer()+"/.well-known/openid-configuration")
	if d["issuer"] != p.Issuer() {
		t.Fatalf("issuer %v, want %s", d["issuer"], p.Issuer())
	}
	if d["jwks_uri"] != p.JWKSURL() {
		t.Fatalf("jwks_uri %v, want %s", d["jwks_uri"], p.JWKSURL())
	}
	grants, _ := d["grant_types_supported"].([]any)
	if !slices.Contains(grants, any("urn:ietf:params:oauth:grant-type:jwt-bearer")) {
		t.Fatalf("grant_types_supported %v lacks the JWT-profile grant", grants)
	}
	keys := getJSON(t, p.JWKSURL())["keys"].([]any)
	if len(keys) != 1 || keys[0].(map[string]any)["kid"] != p.SigningKeyID() {
		t.Fatalf("JWKS %v, want the one signing key %s", keys, p.SigningKeyID())
	}
}

func TestTheJWTProfileGrantIssuesAnIDTokenWithRolesAndLifetime(t *testing.T) {
	ctx := context.Background()
	p := start(t, devop.Options{TokenLifetime: 3 * time.Minute})
	uid, err := p.CreateMachineUser(ctx, "ci-shipper", "fleet-shipper")
	if err != nil {
		t.Fatal(err)
	}
	kf, err := p.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: p.Issuer(), Key: kf, Audience: p.Audience()})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := src.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := claims(t, tok.IDToken)
	got := map[string]any{"iss": c["iss"], "sub": c["sub"], "aud": c["aud"], "roles": c[devop.RolesClaim]}
	want := map[string]any{
		"iss": p.Issuer(), "sub": uid, "aud": []any{devop.DefaultAudience, uid},
		"roles": map[string]any{"fleet-shipper": map[string]any{"fleet-dev": "fleet-dev.localhost"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("id_token claims (-want +got):\n%s", diff)
	}
	if life := tok.Expiry.Sub(tok.IssuedAt); life != 3*time.Minute {
		t.Fatalf("lifetime %s, want 3m", life)
	}
	if tok.Subject != uid {
		t.Fatalf("subject %q, want %q", tok.Subject, uid)
	}
}

func TestGrantsAreRefused(t *testing.T) {
	ctx := context.Background()
	p := start(t, devop.Options{})
	tests := []struct {
		name   string
		break_ func(t *testing.T, uid string, kf credential.KeyFile)
	}{
		{"a removed key is refused", func(t *testing.T, uid string, kf credential.KeyFile) {
			if err := p.RemoveMachineKey(ctx, uid, kf.KeyID); err != nil {
				t.Fatal(err)
			}
		}},
		{"a removed user is refused", func(t *testing.T, uid string, kf credential.KeyFile) {
			if err := p.RemoveMachineUser(ctx, uid); err != nil {
				t.Fatal(err)
			}
		}},
		{"a key registered for another user is refused", func(t *testing.T, uid string, kf credential.KeyFile) {
			if err := p.RemoveMachineKey(ctx, uid, kf.KeyID); err != nil {
				t.Fatal(err)
			}
			other, err := p.CreateMachineUser(ctx, "other-"+uid)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.AddMachineKey(ctx, other, time.Time{}); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			uid, err := p.CreateMachineUser(ctx, strings.ReplaceAll(tc.name, " ", "-"))
			if err != nil {
				t.Fatal(err)
			}
			kf, err := p.AddMachineKey(ctx, uid, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			src, err := credential.New(ctx, credential.Options{Issuer: p.Issuer(), Key: kf})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := src.Token(ctx); err != nil {
				t.Fatalf("grant before revocation: %v", err)
			}
			tc.break_(t, uid, kf)
			src.Invalidate()
			_, err = src.Token(ctx)
			if !errors.Is(err, credential.ErrGrant) {
				t.Fatalf("error %v, want ErrGrant", err)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("error quotes the key: %v", err)
			}
		})
	}
}

func TestAnExpiredKeyIsRefused(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	clock := func() time.Time { return now }
	p := start(t, devop.Options{Now: func() time.Time { return clock() }})
	uid, _ := p.CreateMachineUser(ctx, "d1")
	kf, err := p.AddMachineKey(ctx, uid, now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: p.Issuer(), Key: kf})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := src.Token(ctx); err != nil {
		t.Fatal(err)
	}
	later := now.Add(2 * time.Hour)
	clock = func() time.Time { return later }
	src.Invalidate()
	if _, err := src.Token(ctx); !errors.Is(err, credential.ErrGrant) {
		t.Fatalf("error %v, want ErrGrant", err)
	}
}

func TestRotationKeepsPreviousKeysInTheJWKS(t *testing.T) {
	p := start(t, devop.Options{})
	first := p.SigningKeyID()
	second, err := p.RotateSigningKey(nil, -1)
	if err != nil {
		t.Fatal(err)
	}
	var kids []string
	for _, k := range getJSON(t, p.JWKSURL())["keys"].([]any) {
		kids = append(kids, k.(map[string]any)["kid"].(string))
	}
	if diff := cmp.Diff([]string{second, first}, kids); diff != "" {
		t.Fatalf("JWKS kids (-want +got):\n%s", diff)
	}
	if _, err := p.RotateSigningKey(nil, 0); err != nil {
		t.Fatal(err)
	}
	if n := len(getJSON(t, p.JWKSURL())["keys"].([]any)); n != 1 {
		t.Fatalf("JWKS has %d keys after rotation keeping none, want 1", n)
	}
}

// TestAProviderOnAGivenListenerIssuesTokensForTheIssuerItIsGiven: fleet dev
// passes its own listener (on all interfaces, say) and the URL devices reach
// it at; the provider serves there and every id_token's iss is that URL.
func TestAProviderOnAGivenListenerIssuesTokensForTheIssuerItIsGiven(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	issuer := "http://localhost:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	p := start(t, devop.Options{Listener: ln, Issuer: issuer, Addr: "127.0.0.1:1"})
	if p.Issuer() != issuer {
		t.Fatalf("Issuer() = %s, want %s", p.Issuer(), issuer)
	}
	if d := getJSON(t, issuer+"/.well-known/openid-configuration"); d["issuer"] != issuer {
		t.Fatalf("discovery's issuer %v, want %s", d["issuer"], issuer)
	}
	uid, err := p.CreateMachineUser(ctx, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	kf, err := p.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: issuer, Key: kf, Audience: p.Audience()})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := src.Token(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if iss := claims(t, tok.IDToken)["iss"]; iss != issuer {
		t.Fatalf("id_token iss %v, want %s", iss, issuer)
	}
}

func TestAnUploadedPublicKeyGrantsWithTheCallersPrivateKeyOnly(t *testing.T) {
	ctx := context.Background()
	p := start(t, devop.Options{})
	uid, err := p.CreateMachineUser(ctx, "device-sim-1", "fleet-device")
	if err != nil {
		t.Fatal(err)
	}
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	kf, err := p.AddMachinePublicKey(ctx, uid, &priv.PublicKey, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if kf.Key != "" || kf.KeyID == "" || kf.UserID != uid {
		t.Fatalf("key file %+v: want a key id and the user id, and no key", kf)
	}
	grant := func(k *rsa.PrivateKey) error {
		f := kf
		f.Key = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
		src, err := credential.New(ctx, credential.Options{Issuer: p.Issuer(), Key: f, Audience: p.Audience()})
		if err != nil {
			return err
		}
		_, err = src.Token(ctx)
		return err
	}
	if err := grant(priv); err != nil {
		t.Fatalf("grant with the uploaded key's private half: %v", err)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if err := grant(other); err == nil {
		t.Fatal("a grant signed by another private key under the uploaded key's id was accepted")
	}
	short, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.AddMachinePublicKey(ctx, uid, &short.PublicKey, time.Time{}); !errors.Is(err, devop.ErrBadKey) {
		t.Fatalf("a 1024-bit key: error %v, want ErrBadKey", err)
	}
	if _, err := p.AddMachinePublicKey(ctx, "nobody", &priv.PublicKey, time.Time{}); !errors.Is(err, devop.ErrUnknownUser) {
		t.Fatalf("an unknown user: error %v, want ErrUnknownUser", err)
	}
}

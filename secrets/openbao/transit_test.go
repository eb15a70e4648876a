package openbao_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// ciSigningPolicy is the CI role's transit policy of docs/ci.md: sign with
// the key and read its public keys, nothing else.
const ciSigningPolicy = `
path "transit/sign/app-signing" { capabilities = ["update"] }
path "transit/keys/app-signing" { capabilities = ["read"] }
`

func verifies(t *testing.T, pubPEM string, msg, sig []byte) bool {
	t.Helper()
	block, _ := pem.Decode([]byte(pubPEM))
	if block == nil || block.Type != "PUBLIC KEY" {
		t.Fatalf("public key is not a PEM PUBLIC KEY block: %q", pubPEM)
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	must(t, err)
	sum := sha256.Sum256(msg)
	return ecdsa.VerifyASN1(pub.(*ecdsa.PublicKey), sum[:], sig)
}

func TestTransitSignsWithTheLatestVersionAndCIReadsOnlyPublicKeys(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	must(t, e.admin.EnableTransit(ctx, "transit"))
	must(t, e.admin.TransitCreateKey(ctx, "transit", "app-signing"))
	must(t, e.admin.PutPolicy(ctx, "ci", ciSigningPolicy))
	tok, err := e.admin.CreateToken(ctx, []string{"ci"}, time.Hour)
	must(t, err)
	ci, err := openbao.NewWithToken(openbao.Config{Address: e.bao.URL()}, tok)
	must(t, err)

	msg := []byte(`{"critical":{}}`)
	sig, ver, err := ci.TransitSign(ctx, "transit", "app-signing", msg)
	must(t, err)
	pubs, err := ci.TransitPublicKeys(ctx, "transit", "app-signing")
	must(t, err)
	if ver != 1 || len(pubs) != 1 || !verifies(t, pubs[1], msg, sig) {
		t.Fatalf("version %d, %d public keys: the signature does not verify under version 1's public key", ver, len(pubs))
	}

	must(t, e.admin.TransitRotate(ctx, "transit", "app-signing"))
	sig, ver, err = ci.TransitSign(ctx, "transit", "app-signing", msg)
	must(t, err)
	pubs, err = ci.TransitPublicKeys(ctx, "transit", "app-signing")
	must(t, err)
	if ver != 2 || len(pubs) != 2 || !verifies(t, pubs[2], msg, sig) || verifies(t, pubs[1], msg, sig) {
		t.Fatalf("after a rotation: version %d, %d public keys; want version 2's key to sign, version 1's kept", ver, len(pubs))
	}

	for name, call := range map[string]func() error{
		"export the signing key": func() error { return rawRead(ctx, e.bao.URL()+"/v1/transit/export/signing-key/app-signing", tok) },
		"rotate the key":         func() error { return ci.TransitRotate(ctx, "transit", "app-signing") },
		"create another key":     func() error { return ci.TransitCreateKey(ctx, "transit", "other") },
		"sign with another key":  func() error { _, _, err := ci.TransitSign(ctx, "transit", "other", msg); return err },
	} {
		t.Run("the CI role cannot "+name, func(t *testing.T) {
			if err := call(); !errors.Is(err, openbao.ErrPermissionDenied) {
				t.Fatalf("err = %v, want ErrPermissionDenied", err)
			}
		})
	}
}

func TestTransitKeyReadAnswersOpenBaoShapeWithoutPrivateMaterial(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	must(t, e.admin.EnableTransit(ctx, "transit"))
	must(t, e.admin.TransitCreateKey(ctx, "transit", "app-signing"))
	for _, path := range []string{"/v1/transit/keys/app-signing", "/v1/transit/export/signing-key/app-signing"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.bao.URL()+path, nil)
		req.Header.Set("X-Vault-Token", e.bao.RootToken())
		resp, err := http.DefaultClient.Do(req)
		must(t, err)
		var body struct {
			Data   map[string]any `json:"data"`
			Errors []string       `json:"errors"`
		}
		must(t, json.NewDecoder(resp.Body).Decode(&body))
		resp.Body.Close()
		if strings.Contains(path, "export") {
			if resp.StatusCode != http.StatusBadRequest || !cmp.Equal(body.Errors, []string{"private key material is not exportable"}) {
				t.Fatalf("export: status %d, errors %q; want 400 private key material is not exportable", resp.StatusCode, body.Errors)
			}
			continue
		}
		v1, _ := body.Data["keys"].(map[string]any)["1"].(map[string]any)
		got := map[string]any{"type": body.Data["type"], "exportable": body.Data["exportable"], "supports_signing": body.Data["supports_signing"],
			"latest_version": body.Data["latest_version"], "v1.name": v1["name"], "v1.fields": len(v1)}
		want := map[string]any{"type": "ecdsa-p256", "exportable": false, "supports_signing": true, "latest_version": float64(1), "v1.name": "P-256", "v1.fields": 3}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("GET %s (-want +got):\n%s", path, diff)
		}
		if pk, _ := v1["public_key"].(string); !strings.HasPrefix(pk, "-----BEGIN PUBLIC KEY-----") {
			t.Fatalf("version 1's public_key = %q, want a PEM PUBLIC KEY", pk)
		}
	}
}

// rawRead GETs url with token as OpenBao's API is called, and returns
// openbao.ErrPermissionDenied for a 403 (the client has no export call:
// Fleet never exports).
func rawRead(ctx context.Context, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Vault-Token", token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden {
		return openbao.ErrPermissionDenied
	}
	return fmt.Errorf("status %d", resp.StatusCode)
}

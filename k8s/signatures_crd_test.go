package k8s_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

func p256PEM(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// TestASignaturePolicyIsCheckedByTheAPIServerNamingTheField: what the
// schema can see of spec.signatures (ADR 0023) is refused at the API
// server; the key's algorithm is the operator's to check.
func TestASignaturePolicyIsCheckedByTheAPIServerNamingTheField(t *testing.T) {
	c := newClient(t)
	key, other := p256PEM(t), p256PEM(t)
	keys := func(ks ...fleetv1.TrustedKey) func(*fleetv1.Deployment) {
		return func(d *fleetv1.Deployment) { d.Spec.Signatures = &fleetv1.SignaturePolicy{Keys: ks} }
	}
	var nine []fleetv1.TrustedKey
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"} {
		nine = append(nine, fleetv1.TrustedKey{Name: n, PublicKey: key})
	}
	tests := []struct {
		name   string
		mutate func(*fleetv1.Deployment)
		want   []string // every string in the error; none: accepted
	}{
		{"two named P-256 keys are accepted", keys(fleetv1.TrustedKey{Name: "ci-2026", PublicKey: key}, fleetv1.TrustedKey{Name: "ci-2027", PublicKey: other}), nil},
		{"a policy without keys is refused", keys(), []string{"spec.signatures.keys", "Required value"}},
		{"nine keys are refused", keys(nine...), []string{"spec.signatures.keys", "at most 8"}},
		{"a name that is not a DNS label is refused", keys(fleetv1.TrustedKey{Name: "CI key", PublicKey: key}), []string{"spec.signatures.keys[0].name"}},
		{"a name used twice is refused", keys(fleetv1.TrustedKey{Name: "ci", PublicKey: key}, fleetv1.TrustedKey{Name: "ci", PublicKey: other}),
			[]string{"spec.signatures.keys[1]", "Duplicate value"}},
		{"a public key that is not PEM is refused naming the fix", keys(fleetv1.TrustedKey{Name: "ci", PublicKey: "ssh-ed25519 AAAA"}),
			[]string{"spec.signatures.keys[0].publicKey", "publicKey must be a PEM PUBLIC KEY block"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d := validDeployment("signed")
			tc.mutate(d)
			err := c.Create(ctx, d)
			if err == nil {
				_ = c.Delete(ctx, d)
			}
			if tc.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("the API server accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

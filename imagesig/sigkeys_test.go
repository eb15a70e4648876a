package imagesig_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/imagesig"
	"github.com/nationtech/harmony-fleet/imagesig/sigkeys"
)

func pemOf(t *testing.T, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func TestATrustPolicyNamesOneToEightP256KeysByDistinctNames(t *testing.T) {
	good := newSigner(t, "ci").public
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	edPub, _, _ := ed25519.GenerateKey(rand.Reader)
	many := make([]sigkeys.Key, sigkeys.MaxKeys+1)
	for i := range many {
		many[i] = sigkeys.Key{Name: "k" + string(rune('a'+i)), PublicKey: good}
	}
	tests := []struct {
		name string
		keys []sigkeys.Key
		want string // a part of the error; "" for none
	}{
		{"one P-256 key is a policy", []sigkeys.Key{{Name: "ci", PublicKey: good}}, ""},
		{"no key is refused", nil, "spec.signatures.keys is empty"},
		{"more than eight keys are refused", many, "at most 8"},
		{"a name that is not a DNS label is refused", []sigkeys.Key{{Name: "CI key", PublicKey: good}}, `spec.signatures.keys[0].name "CI key": use a DNS label`},
		{"a name used twice is refused", []sigkeys.Key{{Name: "ci", PublicKey: good}, {Name: "ci", PublicKey: good}}, "is used twice"},
		{"a P-384 key is refused", []sigkeys.Key{{Name: "ci", PublicKey: pemOf(t, &p384.PublicKey)}}, "spec.signatures.keys[0].publicKey: not a PEM PUBLIC KEY block holding an ECDSA P-256 key"},
		{"an Ed25519 key is refused", []sigkeys.Key{{Name: "ci", PublicKey: pemOf(t, edPub)}}, "keys[0].publicKey"},
		{"text that is no PEM is refused", []sigkeys.Key{{Name: "ci", PublicKey: "ssh-ed25519 AAAA"}}, "keys[0].publicKey"},
		{"a private key is refused", []sigkeys.Key{{Name: "ci", PublicKey: string(newSigner(t, "x").private)}}, "keys[0].publicKey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := sigkeys.CheckKeys("spec.signatures.keys", tt.keys)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckKeys = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckKeys = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestTheSigningKeysPublicKeyIsTheOneItWasGeneratedWith(t *testing.T) {
	s := newSigner(t, "ci")
	got, err := imagesig.SigningPublicKey(s.private, s.passphrase)
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(got) != strings.TrimSpace(s.public) {
		t.Errorf("public key\n%s\nwant\n%s", got, s.public)
	}
	if _, err := imagesig.SigningPublicKey(s.private, []byte("wrong")); err != imagesig.ErrBadSigningKey {
		t.Errorf("a wrong passphrase: %v, want ErrBadSigningKey", err)
	}
}

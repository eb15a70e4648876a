// Package sigkeys owns the keys of an image trust policy (ADR 0023):
// parsing and checking a trusted public key, its id, and the checks a
// policy's key list must pass, with errors that name the field and the
// fix. Standard library only, so the operator checks a Deployment's policy
// without linking containers/image.
package sigkeys

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// MaxKeys is the most public keys one trust policy holds: enough for a
// rotation (old and new) with room to spare.
const MaxKeys = 8

// ErrBadKey: a public key of the trust policy is not a PEM "PUBLIC KEY"
// block holding an ECDSA P-256 key.
var ErrBadKey = errors.New("not a PEM PUBLIC KEY block holding an ECDSA P-256 key")

// Key is one trusted public key of a policy.
type Key struct {
	// Name identifies the key in reasons and logs ("ci-2026"): a DNS
	// label, unique in its policy.
	Name string
	// PublicKey is the PEM "PUBLIC KEY" block (PKIX) of an ECDSA P-256
	// key.
	PublicKey string
}

// ID is the key's name and fingerprint, as reasons name a key:
// "ci-2026 (sha256:0123456789abcdef)". A key that does not parse shows
// its name only.
func (k Key) ID() string {
	id, err := KeyID(k.PublicKey)
	if err != nil {
		return k.Name
	}
	return k.Name + " (" + id + ")"
}

var keyName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// ParsePublicKey parses a PEM "PUBLIC KEY" block holding an ECDSA P-256
// key: the only scheme every sigstore verifier must support, and the one
// Sign's keys have. Anything else (another curve, RSA, Ed25519, trailing
// data, a private key) is ErrBadKey.
func ParsePublicKey(pemText string) (*ecdsa.PublicKey, error) {
	block, rest := pem.Decode([]byte(pemText))
	if block == nil || block.Type != "PUBLIC KEY" || strings.TrimSpace(string(rest)) != "" {
		return nil, ErrBadKey
	}
	pub, err := x509.ParsePKIXPublicKey(block.Bytes)
	if err != nil {
		return nil, ErrBadKey
	}
	ec, ok := pub.(*ecdsa.PublicKey)
	if !ok || ec.Curve != elliptic.P256() {
		return nil, ErrBadKey
	}
	return ec, nil
}

// KeyID is the public key's fingerprint: "sha256:" and the first 16 hex
// digits of the SHA-256 of its DER encoding.
func KeyID(pemText string) (string, error) {
	pub, err := ParsePublicKey(pemText)
	if err != nil {
		return "", err
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("imagesig: encode public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:8]), nil
}

// CheckKeys checks a trust policy's keys: 1 to MaxKeys, each named with a
// DNS label used once, each an ECDSA P-256 public key. field names the
// keys in the errors ("spec.signatures.keys"); the errors say what to fix.
func CheckKeys(field string, keys []Key) error {
	if len(keys) == 0 {
		return fmt.Errorf("%s is empty: name at least one trusted public key (or remove the signatures policy)", field)
	}
	if len(keys) > MaxKeys {
		return fmt.Errorf("%s has %d keys: at most %d are trusted at once (remove keys no running revision needs)", field, len(keys), MaxKeys)
	}
	var errs []error
	seen := map[string]bool{}
	for i, k := range keys {
		switch {
		case !keyName.MatchString(k.Name):
			errs = append(errs, fmt.Errorf("%s[%d].name %q: use a DNS label (lower-case letters, digits and '-', at most 63)", field, i, k.Name))
		case seen[k.Name]:
			errs = append(errs, fmt.Errorf("%s[%d].name %q is used twice: give every key its own name", field, i, k.Name))
		}
		seen[k.Name] = true
		if _, err := ParsePublicKey(k.PublicKey); err != nil {
			errs = append(errs, fmt.Errorf("%s[%d].publicKey: %w (the PEM public key printed with the signing key)", field, i, err))
		}
	}
	return errors.Join(errs...)
}

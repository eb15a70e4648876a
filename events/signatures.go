package events

// SignaturePolicy is a revision's image trust policy (ADR 0023): the
// public keys whose sigstore signatures a device accepts. An image is
// accepted when one signature in its registry attachment verifies under
// one of Keys for the digest the device pulled. Public keys are not
// secrets.
type SignaturePolicy struct {
	Keys []SignatureKey `json:"keys"`
}

// SignatureKey is one trusted public key.
type SignatureKey struct {
	// Name identifies the key in a device's reasons ("ci-2026").
	Name string `json:"name"`
	// PublicKey is the PEM "PUBLIC KEY" block of an ECDSA P-256 key.
	PublicKey string `json:"publicKey"`
}

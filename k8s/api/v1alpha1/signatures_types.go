package v1alpha1

// SignaturePolicy is a Deployment's image trust policy (ADR 0023): a
// device creates no container of a revision unless every image it pulled
// (the init container's and every service's) is signed, for the digest it
// pulled, by one of Keys. Several keys at once are how a signing key is
// rotated. The policy is frozen with the revision.
type SignaturePolicy struct {
	// Keys are the trusted public keys (1 to 8).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Keys []TrustedKey `json:"keys"`
}

// TrustedKey is one trusted public key of a SignaturePolicy.
type TrustedKey struct {
	// Name identifies the key in a device's reasons ("ci-2026"): a DNS
	// label, unique in the policy.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`
	// PublicKey is the PEM "PUBLIC KEY" block of an ECDSA P-256 key (the
	// public half of the key `harmony ship` signs with). Not a secret.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self.startsWith('-----BEGIN PUBLIC KEY-----')",message="publicKey must be a PEM PUBLIC KEY block (an ECDSA P-256 public key)"
	PublicKey string `json:"publicKey"`
}

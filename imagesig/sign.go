package imagesig

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/opencontainers/go-digest"
	"github.com/secure-systems-lab/go-securesystemslib/encrypted"
	"go.podman.io/image/v5/copy"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/signature/signer"
	"go.podman.io/image/v5/signature/sigstore"
)

// ErrBadSigningKey: the private key does not decrypt with the passphrase,
// or is not an ECDSA P-256 key in the sigstore (cosign) format.
var ErrBadSigningKey = errors.New("the signing key is not an encrypted sigstore ECDSA P-256 private key that opens with its passphrase")

// ErrDigestChanged: signing would have written a manifest of another
// digest than the one pushed (the registry or the copy converted it).
var ErrDigestChanged = errors.New("the signed manifest's digest is not the pushed digest")

// GenerateSigningKey makes a new ECDSA P-256 key pair in the sigstore
// (cosign) format: the private key encrypted with passphrase, and its PEM
// public key, the one trust policies name.
func GenerateSigningKey(passphrase []byte) (privateKey, publicKey []byte, err error) {
	kp, err := sigstore.GenerateKeyPair(passphrase)
	if err != nil {
		return nil, nil, fmt.Errorf("imagesig: generate key: %w", err)
	}
	return kp.PrivateKey, kp.PublicKey, nil
}

// SigningPublicKey returns the PEM public key of an encrypted sigstore
// private key, checking that passphrase opens it: ErrBadSigningKey when
// it does not or the key is not ECDSA P-256.
func SigningPublicKey(privateKey, passphrase []byte) (string, error) {
	block, _ := pem.Decode(privateKey)
	if block == nil || (block.Type != "ENCRYPTED SIGSTORE PRIVATE KEY" && block.Type != "ENCRYPTED COSIGN PRIVATE KEY") {
		return "", ErrBadSigningKey
	}
	der, err := encrypted.Decrypt(block.Bytes, passphrase)
	if err != nil {
		return "", ErrBadSigningKey
	}
	pk, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return "", ErrBadSigningKey
	}
	ec, ok := pk.(*ecdsa.PrivateKey)
	if !ok || ec.Curve != elliptic.P256() {
		return "", ErrBadSigningKey
	}
	pub, err := x509.MarshalPKIXPublicKey(ec.Public())
	if err != nil {
		return "", fmt.Errorf("imagesig: encode public key: %w", err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})), nil
}

// SignOptions says what Sign signs, and with what.
type SignOptions struct {
	// Pushed is the image as pushed, by digest ("host/repo@sha256:…").
	Pushed string
	// Tag is the tag it was pushed under ("host/repo:tag"): the signed
	// identity. Same repository as Pushed.
	Tag string
	// PrivateKey is the encrypted sigstore private key (PEM) and
	// Passphrase its passphrase: the key-file signing. Exclusive with
	// Signer.
	PrivateKey []byte
	Passphrase []byte
	// Signer signs with a key held elsewhere (OpenBao transit), and
	// SignerPublicKey is the PEM public key of the key version it signs
	// with now: every signature is checked under it before it is written
	// (ErrSignerMismatch). Exclusive with PrivateKey.
	Signer          PayloadSigner
	SignerPublicKey string
	// Auth is the push credential of the registry.
	Auth *Auth
	// Progress receives containers/image's progress lines; nil: none.
	Progress io.Writer
}

// Sign adds a signature of opts.Pushed's digest, made with opts.PrivateKey
// or opts.Signer for the identity opts.Tag, to the image's sigstore
// attachment in the registry (beside those it has). It copies the image
// onto itself with containers/image's signing (its payload, its
// attachment writing) and fails with ErrDigestChanged if the manifest
// written is not the pushed one. A private key file lives only in a
// private temporary folder, removed before Sign returns; with a Signer no
// private key is ever here.
func Sign(ctx context.Context, opts SignOptions) error {
	pushed, err := reference.ParseNormalizedNamed(opts.Pushed)
	if err != nil {
		return fmt.Errorf("imagesig: sign %s: %w", opts.Pushed, err)
	}
	canon, ok := pushed.(reference.Canonical)
	if !ok {
		return fmt.Errorf("imagesig: sign %s: not a reference by digest", opts.Pushed)
	}
	tag, err := reference.ParseNormalizedNamed(opts.Tag)
	if err != nil {
		return fmt.Errorf("imagesig: sign %s: %w", opts.Tag, err)
	}
	if _, ok := tag.(reference.NamedTagged); !ok || tag.Name() != pushed.Name() {
		return fmt.Errorf("imagesig: sign %s: %s is not a tag of the same repository", opts.Pushed, opts.Tag)
	}
	if (opts.Signer == nil) == (opts.PrivateKey == nil) {
		return fmt.Errorf("imagesig: sign %s: set exactly one of PrivateKey (a key file) and Signer (a remote key)", opts.Pushed)
	}
	dir, err := attachmentsConfig()
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	copyOpts := &copy.Options{PreserveDigests: true, ReportWriter: opts.Progress}
	if opts.Signer != nil {
		sg, err := newRemoteSigner(ctx, opts.Signer, opts.SignerPublicKey)
		if err != nil {
			return err
		}
		defer sg.Close()
		copyOpts.Signers = []*signer.Signer{sg}
	} else {
		if opts.Passphrase == nil {
			opts.Passphrase = []byte{} // containers/image refuses a nil one
		}
		if _, err := SigningPublicKey(opts.PrivateKey, opts.Passphrase); err != nil {
			return err
		}
		keyFile := filepath.Join(dir, "signing.key")
		if err := os.WriteFile(keyFile, opts.PrivateKey, 0o600); err != nil {
			return fmt.Errorf("imagesig: sign %s: write the key to the temporary folder: %w", opts.Pushed, err)
		}
		copyOpts.SignBySigstorePrivateKeyFile, copyOpts.SignSigstorePrivateKeyPassphrase = keyFile, opts.Passphrase
	}
	srcRef, err := docker.NewReference(canon)
	if err != nil {
		return fmt.Errorf("imagesig: sign %s: %w", opts.Pushed, err)
	}
	destRef, err := docker.NewReference(tag)
	if err != nil {
		return fmt.Errorf("imagesig: sign %s: %w", opts.Tag, err)
	}
	pc, err := signature.NewPolicyContext(&signature.Policy{Default: signature.PolicyRequirements{signature.NewPRInsecureAcceptAnything()}})
	if err != nil {
		return fmt.Errorf("imagesig: sign %s: %w", opts.Pushed, err)
	}
	defer func() { _ = pc.Destroy() }()
	sys := systemContext(dir, opts.Auth)
	copyOpts.SourceCtx, copyOpts.DestinationCtx = sys, sys
	man, err := copy.Image(ctx, pc, destRef, srcRef, copyOpts)
	if errors.Is(err, ErrSignerMismatch) {
		return fmt.Errorf("imagesig: sign %s: %w", opts.Pushed, ErrSignerMismatch)
	}
	if err != nil {
		return fmt.Errorf("imagesig: sign %s: %s", opts.Pushed, oneLine(err.Error(), opts.Auth))
	}
	if got := digest.FromBytes(man); got != canon.Digest() {
		return fmt.Errorf("imagesig: sign %s: %w (wrote %s)", opts.Pushed, ErrDigestChanged, got)
	}
	return nil
}

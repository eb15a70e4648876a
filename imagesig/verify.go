package imagesig

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"unicode"

	"github.com/opencontainers/go-digest"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"

	"github.com/nationtech/harmony-fleet/imagesig/sigkeys"
)

// Sentinels that classify a refused image (Error.Err).
var (
	// ErrNoSignature: the registry holds no signature for the digest.
	ErrNoSignature = errors.New("image signature missing")
	// ErrUntrusted: signatures exist, but none verifies under a trusted
	// key for this digest and repository (another key, another digest,
	// a damaged signature), or the image cannot be checked at all.
	ErrUntrusted = errors.New("image signature not trusted")
	// ErrRegistryUnavailable: the registry could not be reached while
	// the signatures were read. It says nothing about the image: the
	// caller retries.
	ErrRegistryUnavailable = errors.New("registry unavailable while reading image signatures")
)

// maxReason bounds the engine's words a reason quotes.
const maxReason = 300

// Error is a refused image: which image and digest, why, and which keys
// were tried. It never holds a credential.
type Error struct {
	// Image is the reference the score names.
	Image string
	// Digest is the manifest digest the device's engine has for it.
	Digest string
	// Reason is one line saying why.
	Reason string
	// Keys are the ids of the keys tried (sigkeys.Key.ID).
	Keys []string
	// Err is ErrNoSignature, ErrUntrusted or ErrRegistryUnavailable.
	Err error
}

// Error is "image <ref> (digest <d>) is not signed by a trusted key:
// <reason>; keys tried: <ids>".
func (e *Error) Error() string {
	return fmt.Sprintf("image %s (digest %s) is not signed by a trusted key: %s; keys tried: %s",
		e.Image, e.Digest, e.Reason, strings.Join(e.Keys, ", "))
}

// Unwrap returns the sentinel.
func (e *Error) Unwrap() error { return e.Err }

// Auth is a registry credential, passed per call and never stored or
// shown.
type Auth struct {
	Username string
	Password string
}

// String hides the password.
func (a Auth) String() string { return "Auth{" + a.Username + ", ***}" }

// GoString hides the password.
func (a Auth) GoString() string { return a.String() }

// Request is one image to check.
type Request struct {
	// Image is the reference the score names ("host/repo:tag" or
	// "host/repo@sha256:…"); only its repository is used.
	Image string
	// Digest is the manifest digest the device's engine pulled
	// ("sha256:…"): the signature must be for it, whatever the
	// registry's tag says now.
	Digest string
	// Keys are the trusted public keys (CheckKeys).
	Keys []sigkeys.Key
	// Auth is the pull credential of Image's registry; nil: anonymous (or
	// what the host's container configuration holds, as for a pull).
	Auth *Auth
	// Credential, when Auth is nil, reads the pull credential: Verify
	// calls it only when it must read the registry, never for a check it
	// remembers. Its error is returned as it is.
	Credential func(context.Context) (*Auth, error)
}

// Verifier checks images against trust policies. It remembers the
// checks that passed (per repository, digest and key set) for its
// lifetime; refusals are never remembered. Safe for concurrent use.
type Verifier struct {
	dir string // a registries.d turning sigstore attachments on

	mu     sync.Mutex
	passed map[string]bool
}

// maxRemembered bounds the passed checks a Verifier keeps; past it the
// memory starts over.
const maxRemembered = 1024

// NewVerifier returns a Verifier. Close removes its temporary
// configuration.
func NewVerifier() (*Verifier, error) {
	dir, err := attachmentsConfig()
	if err != nil {
		return nil, err
	}
	return &Verifier{dir: dir, passed: map[string]bool{}}, nil
}

// Close removes the Verifier's temporary configuration.
func (v *Verifier) Close() error { return os.RemoveAll(v.dir) }

// attachmentsConfig writes a registries.d folder that makes the docker
// transport read and write sigstore attachments for every registry, and
// returns it.
func attachmentsConfig() (string, error) {
	dir, err := os.MkdirTemp("", "fleet-imagesig-")
	if err != nil {
		return "", fmt.Errorf("imagesig: temporary configuration: %w", err)
	}
	cfg := "default-docker:\n  use-sigstore-attachments: true\n"
	if err := os.WriteFile(filepath.Join(dir, "fleet-sigstore.yaml"), []byte(cfg), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("imagesig: temporary configuration: %w", err)
	}
	return dir, nil
}

// systemContext is the containers/image configuration of one call.
func systemContext(dir string, auth *Auth) *types.SystemContext {
	sys := &types.SystemContext{RegistriesDirPath: dir, DockerRegistryUserAgent: "fleet-imagesig"}
	if auth != nil {
		sys.DockerAuthConfig = &types.DockerAuthConfig{Username: auth.Username, Password: auth.Password}
	}
	return sys
}

// Verify checks that the registry holds a signature of r.Digest, for
// r.Image's repository, that verifies under one of r.Keys. A refusal is an
// *Error; so is a registry that cannot be reached (ErrRegistryUnavailable
// in its chain). Any other error means the request itself is wrong (no
// keys, a malformed reference or digest).
func (v *Verifier) Verify(ctx context.Context, r Request) error {
	if err := sigkeys.CheckKeys("keys", r.Keys); err != nil {
		return fmt.Errorf("imagesig: %w", err)
	}
	ids := make([]string, len(r.Keys))
	pems := make([][]byte, len(r.Keys))
	for i, k := range r.Keys {
		ids[i], pems[i] = k.ID(), []byte(k.PublicKey)
	}
	refuse := func(sentinel error, reason string) error {
		return &Error{Image: r.Image, Digest: r.Digest, Reason: reason, Keys: ids, Err: sentinel}
	}
	d, err := digest.Parse(r.Digest)
	if err != nil || d.Algorithm() != digest.SHA256 {
		return refuse(ErrUntrusted, "the device's engine has no registry digest for it (an image built or loaded on the device cannot be verified)")
	}
	pinned, err := pin(r.Image, d)
	if err != nil {
		return err
	}
	key := rememberKey(pinned.String(), pems)
	if v.remembered(key) {
		return nil
	}
	if r.Auth == nil && r.Credential != nil {
		if r.Auth, err = r.Credential(ctx); err != nil {
			return err
		}
	}
	req, err := signature.NewPRSigstoreSigned(signature.PRSigstoreSignedWithKeyDatas(pems),
		signature.PRSigstoreSignedWithSignedIdentity(signature.NewPRMMatchRepoDigestOrExact()))
	if err != nil {
		return fmt.Errorf("imagesig: trust policy: %w", err)
	}
	pc, err := signature.NewPolicyContext(&signature.Policy{Default: signature.PolicyRequirements{req}})
	if err != nil {
		return fmt.Errorf("imagesig: trust policy: %w", err)
	}
	defer func() { _ = pc.Destroy() }()
	ref, err := docker.NewReference(pinned)
	if err != nil {
		return fmt.Errorf("imagesig: image %q: %w", r.Image, err)
	}
	sys := systemContext(v.dir, r.Auth)
	src, err := ref.NewImageSource(ctx, sys)
	if err != nil {
		return v.readFailed(ctx, refuse, err, r.Auth)
	}
	defer src.Close()
	// The manifest first: a registry that cannot serve the digest's
	// manifest is told apart from a signature that does not verify.
	if _, _, err := src.GetManifest(ctx, nil); err != nil {
		return v.readFailed(ctx, refuse, err, r.Auth)
	}
	ok, err := pc.IsRunningImageAllowed(ctx, image.UnparsedInstance(src, nil))
	if ok && err == nil {
		v.remember(key)
		return nil
	}
	if err == nil || ctx.Err() != nil || unreachable(err) {
		return v.readFailed(ctx, refuse, err, r.Auth)
	}
	// containers/image's rejections are a PolicyRequirementError or an
	// error type of its own internals: told apart by their words.
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no signature exists"):
		return refuse(ErrNoSignature, "the registry holds no signature for this digest")
	case strings.Contains(msg, "reasons:"):
		// Several signatures, none accepted: each says why.
	case strings.Contains(msg, "cryptographic signature verification failed"):
		return refuse(ErrUntrusted, "its signature was not made by a trusted key")
	case strings.Contains(msg, "Signature for digest") || strings.Contains(msg, "Signature for docker digest"):
		return refuse(ErrUntrusted, "the signature a trusted key made is for another digest")
	case strings.Contains(msg, "Signature for identity") || strings.Contains(msg, "Docker reference"):
		return refuse(ErrUntrusted, "the signature a trusted key made is for another repository")
	}
	return refuse(ErrUntrusted, "no signature verifies under a trusted key ("+oneLine(msg, r.Auth)+")")
}

// pin is image's repository at digest d.
func pin(image string, d digest.Digest) (reference.Canonical, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return nil, fmt.Errorf("imagesig: image %q: %w", image, err)
	}
	pinned, err := reference.WithDigest(reference.TrimNamed(named), d)
	if err != nil {
		return nil, fmt.Errorf("imagesig: image %q: %w", image, err)
	}
	return pinned, nil
}

// PinnedReference is image's repository at digest d ("host/repo@sha256:…"),
// image's tag or digest dropped: the reference Verify checks signatures
// for, and the one to create a container from so that it runs what was
// verified.
func PinnedReference(image, d string) (string, error) {
	dg, err := digest.Parse(d)
	if err != nil {
		return "", fmt.Errorf("imagesig: digest %q: %w", d, err)
	}
	p, err := pin(image, dg)
	if err != nil {
		return "", err
	}
	return p.String(), nil
}

// readFailed is the error of signatures that could not be read: the
// registry unreachable (ErrRegistryUnavailable), anything else a refusal.
func (v *Verifier) readFailed(ctx context.Context, refuse func(error, string) error, err error, auth *Auth) error {
	if err == nil {
		err = errors.New("the policy neither accepted nor refused the image")
	}
	if ctx.Err() != nil {
		return fmt.Errorf("imagesig: %w", ctx.Err())
	}
	if unreachable(err) {
		return refuse(ErrRegistryUnavailable, "the registry could not be reached to read the signatures ("+oneLine(err.Error(), auth)+")")
	}
	return refuse(ErrUntrusted, "the image or its signatures could not be read from the registry ("+oneLine(err.Error(), auth)+")")
}

// unreachable reports a transport failure or a server error.
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	if errors.As(err, &op) || errors.As(err, &dns) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return true
	}
	msg := err.Error()
	for _, s := range []string{"500 Internal Server Error", "502 Bad Gateway", "503 Service Unavailable", "504 Gateway Timeout", "i/o timeout", "TLS handshake timeout"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// oneLine is text on one line, printable, without the password, at most
// maxReason runes.
func oneLine(text string, auth *Auth) string {
	if auth != nil && auth.Password != "" {
		text = strings.ReplaceAll(text, auth.Password, "***")
	}
	text = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, text)
	if r := []rune(text); len(r) > maxReason {
		text = string(r[:maxReason]) + "…"
	}
	return text
}

// rememberKey identifies a check: the pinned reference and the key set.
func rememberKey(pinned string, pems [][]byte) string {
	sums := make([]string, len(pems))
	for i, p := range pems {
		s := sha256.Sum256(p)
		sums[i] = hex.EncodeToString(s[:])
	}
	slices.Sort(sums)
	return pinned + " " + strings.Join(sums, ",")
}

func (v *Verifier) remembered(key string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.passed[key]
}

func (v *Verifier) remember(key string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.passed) >= maxRemembered {
		v.passed = map[string]bool{}
	}
	v.passed[key] = true
}

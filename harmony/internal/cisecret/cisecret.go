// Package cisecret is harmony's one-secret flow: the Zitadel machine key
// from the CI variable HARMONY_ZITADEL_KEY_JSON is exchanged (JWT-profile
// grant, identity/credential) for an id_token, which logs in to OpenBao
// (JWT auth, the context's role); the push robot's RegistryCredentials and
// the tenant namespace's kubeconfig are then read from OpenBao KV v2, and
// images are signed through OpenBao transit (TransitKey) or, without
// transit, with the key file read from KV (SigningKey).
//
// Invariants: the key, the id_token, the OpenBao token and every value read
// are held in memory only; String and GoString of the types holding them
// redact them, and errors name variables, paths and fields, never values.
// Only package harmony imports it.
package cisecret

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/nationtech/harmony-fleet/identity/credential"
)

// KeyVariable is the CI variable holding the Zitadel machine key JSON: the
// only secret a pipeline gives harmony.
const KeyVariable = "HARMONY_ZITADEL_KEY_JSON"

// ErrKeyVariable means KeyVariable is unset, empty or not a valid machine
// key; the error says which, naming the variable and the field, never the
// key.
var ErrKeyVariable = errors.New("cisecret: " + KeyVariable + " is not a usable Zitadel machine key")

// ErrLogin means the JWT-profile grant or the OpenBao login failed.
var ErrLogin = errors.New("cisecret: login failed")

// ErrSecret means a secret is missing, unreadable or malformed; the error
// names the path and the field.
var ErrSecret = errors.New("cisecret: secret unusable")

// Store is the part of the OpenBao client (package secrets/openbao) harmony
// uses: JWT login, then KV v2 reads and transit signing.
type Store interface {
	// Login performs the JWT auth login with the id_token.
	Login(ctx context.Context, jwt string) error
	// Read returns the data of the KV v2 secret at path.
	Read(ctx context.Context, path string) (map[string]any, error)
	// TransitPublicKeys returns the PEM public key of each version of the
	// transit key name at mount.
	TransitPublicKeys(ctx context.Context, mount, name string) (map[int]string, error)
	// TransitSign signs input (SHA-256, ASN.1) with the latest version of
	// the transit key name at mount: the DER signature and that version.
	TransitSign(ctx context.Context, mount, name string, input []byte) ([]byte, int, error)
}

// Options configure Open.
type Options struct {
	// KeyJSON is the value of KeyVariable; empty means unset.
	KeyJSON string
	// Issuer is the Zitadel issuer URL. Default: the key's issuer field.
	Issuer string
	// Audience is the project id to request as the id_token's audience.
	// Default: the key's audience field.
	Audience string
	// Store is an OpenBao client for the context's URL and role, not yet
	// logged in.
	Store Store
	// HTTPClient talks to Zitadel. Default: a client with a 30 s timeout.
	HTTPClient *http.Client
	// Logger receives progress (never secrets). Default: discard.
	Logger *slog.Logger
}

// Session is a logged-in OpenBao session of the CI identity.
type Session struct {
	store Store
	log   *slog.Logger
}

// ParseKey parses the value of KeyVariable. Errors wrap ErrKeyVariable and
// name the variable and, for a malformed key, the field.
func ParseKey(value string) (credential.KeyFile, error) {
	if strings.TrimSpace(value) == "" {
		return credential.KeyFile{}, fmt.Errorf("%w: the variable is not set: give the CI job the tenant's Zitadel machine key JSON in %s", ErrKeyVariable, KeyVariable)
	}
	k, err := credential.ParseKeyFile([]byte(value))
	if err != nil {
		// err names the field only (credential never quotes the key).
		return credential.KeyFile{}, fmt.Errorf("%w: %w", ErrKeyVariable, err)
	}
	return k, nil
}

// Open exchanges the machine key for an id_token and logs in to OpenBao.
func Open(ctx context.Context, o Options) (*Session, error) {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	key, err := ParseKey(o.KeyJSON)
	if err != nil {
		return nil, err
	}
	issuer := o.Issuer
	if issuer == "" {
		issuer = key.Issuer
	}
	if issuer == "" {
		return nil, fmt.Errorf("%w: no Zitadel URL: set the context's Zitadel.URL", ErrLogin)
	}
	audience := o.Audience
	if audience == "" {
		audience = key.Audience
	}
	if o.Store == nil {
		return nil, fmt.Errorf("%w: no OpenBao client", ErrLogin)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: issuer, Key: key, Audience: audience, HTTPClient: o.HTTPClient, Logger: log})
	if err != nil {
		return nil, fmt.Errorf("%w: Zitadel at %s: %w", ErrLogin, issuer, err)
	}
	tok, err := src.Token(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: Zitadel at %s: %w", ErrLogin, issuer, err)
	}
	log.InfoContext(ctx, "id_token obtained", "subject", tok.Subject, "issuer", issuer)
	if err := o.Store.Login(ctx, tok.IDToken); err != nil {
		return nil, fmt.Errorf("%w: OpenBao: %w", ErrLogin, scrub(err, tok.IDToken))
	}
	return &Session{store: o.Store, log: log}, nil
}

// RegistryCredentials is the push robot of the context's registry.
type RegistryCredentials struct {
	// Registry is the registry authority (host[:port]) the credential is
	// for.
	Registry string
	// Username of the push robot.
	Username string
	// Password is secret.
	Password string
}

// String names the registry and user, never the password.
func (r RegistryCredentials) String() string {
	return fmt.Sprintf("registry credentials for %s (user %s, password redacted)", r.Registry, r.Username)
}

// GoString is String.
func (r RegistryCredentials) GoString() string { return r.String() }

// RegistryCredentials reads the push robot at path; its registry must be
// registry (host compared case-insensitively, port included), so a
// credential is never sent to another registry.
func (s *Session) RegistryCredentials(ctx context.Context, path, registry string) (RegistryCredentials, error) {
	data, err := s.read(ctx, path)
	if err != nil {
		return RegistryCredentials{}, err
	}
	var r RegistryCredentials
	for _, f := range []struct {
		name string
		dst  *string
	}{{"registry", &r.Registry}, {"username", &r.Username}, {"password", &r.Password}} {
		v, ok := data[f.name].(string)
		if !ok || v == "" {
			return RegistryCredentials{}, fmt.Errorf("%w: %s: field %q is missing or not a string (want registry, username and password)", ErrSecret, path, f.name)
		}
		*f.dst = v
	}
	if !strings.EqualFold(r.Registry, registry) {
		return RegistryCredentials{}, fmt.Errorf("%w: %s: field \"registry\" is %q but the context pushes to %q: store the push robot of %s there",
			ErrSecret, path, r.Registry, registry, registry)
	}
	s.log.InfoContext(ctx, "registry credentials read", "path", path, "registry", r.Registry, "user", r.Username)
	return r, nil
}

// Kubeconfig reads the cluster access at path (field kubeconfig, a
// kubeconfig document).
func (s *Session) Kubeconfig(ctx context.Context, path string) ([]byte, error) {
	data, err := s.read(ctx, path)
	if err != nil {
		return nil, err
	}
	v, ok := data["kubeconfig"].(string)
	if !ok || v == "" {
		return nil, fmt.Errorf("%w: %s: field \"kubeconfig\" is missing or not a string", ErrSecret, path)
	}
	s.log.InfoContext(ctx, "cluster access read", "path", path)
	return []byte(v), nil
}

func (s *Session) read(ctx context.Context, path string) (map[string]any, error) {
	data, err := s.store.Read(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%w: OpenBao %s: %w", ErrSecret, path, err)
	}
	if data == nil {
		return nil, fmt.Errorf("%w: OpenBao %s: no data", ErrSecret, path)
	}
	return data, nil
}

// scrub removes secret from err's text should a client ever quote it.
func scrub(err error, secret string) error {
	if secret == "" || !strings.Contains(err.Error(), secret) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), secret, "[redacted]"))
}

// SigningKey is the image signing key of a context (ADR 0023): an
// encrypted sigstore private key and its passphrase. Both are secret.
type SigningKey struct {
	// PrivateKey is the PEM of the encrypted sigstore (cosign) private
	// key.
	PrivateKey []byte
	// Passphrase opens it.
	Passphrase []byte
}

// String shows neither the key nor the passphrase.
func (k SigningKey) String() string { return "signing key (redacted)" }

// GoString is String.
func (k SigningKey) GoString() string { return k.String() }

// SigningKey reads the image signing key at path: fields privateKey (the
// encrypted PEM) and passphrase (may be empty).
func (s *Session) SigningKey(ctx context.Context, path string) (SigningKey, error) {
	data, err := s.read(ctx, path)
	if err != nil {
		return SigningKey{}, err
	}
	priv, ok := data["privateKey"].(string)
	if !ok || priv == "" {
		return SigningKey{}, fmt.Errorf("%w: %s: field \"privateKey\" is missing or not a string (want privateKey and passphrase)", ErrSecret, path)
	}
	pass, ok := data["passphrase"].(string)
	if _, present := data["passphrase"]; present && !ok {
		return SigningKey{}, fmt.Errorf("%w: %s: field \"passphrase\" is not a string", ErrSecret, path)
	}
	s.log.InfoContext(ctx, "signing key read", "path", path)
	return SigningKey{PrivateKey: []byte(priv), Passphrase: []byte(pass)}, nil
}

// TransitKey is an OpenBao transit signing key the CI identity signs with
// and reads the public keys of; its private key never leaves OpenBao. It
// is an imagesig.PayloadSigner.
type TransitKey struct {
	// Mount and Name locate the key (<Mount>/keys/<Name>).
	Mount, Name string
	// PublicKeys are the PEM public keys of its versions, by version.
	PublicKeys map[int]string
	// Latest is the version that signs.
	Latest int

	store Store
	log   *slog.Logger
}

// TransitKey reads the public keys of the transit key name at mount (read
// on <mount>/keys/<name>); signing needs update on <mount>/sign/<name>.
func (s *Session) TransitKey(ctx context.Context, mount, name string) (*TransitKey, error) {
	path := mount + "/keys/" + name
	pubs, err := s.store.TransitPublicKeys(ctx, mount, name)
	if err != nil {
		return nil, fmt.Errorf("%w: OpenBao transit key %s: %w", ErrSecret, path, err)
	}
	k := &TransitKey{Mount: mount, Name: name, PublicKeys: pubs, store: s.store, log: s.log}
	for v := range pubs {
		k.Latest = max(k.Latest, v)
	}
	s.log.InfoContext(ctx, "transit signing key read", "path", path, "versions", len(pubs), "latest", k.Latest)
	return k, nil
}

// SignPayload signs payload with the key's latest version in OpenBao.
func (k *TransitKey) SignPayload(ctx context.Context, payload []byte) ([]byte, error) {
	sig, ver, err := k.store.TransitSign(ctx, k.Mount, k.Name, payload)
	if err != nil {
		return nil, fmt.Errorf("cisecret: OpenBao transit %s/sign/%s: %w", k.Mount, k.Name, err)
	}
	if ver != k.Latest {
		k.log.WarnContext(ctx, "transit key rotated during the ship", "path", k.Mount+"/keys/"+k.Name, "read", k.Latest, "signed", ver)
	}
	return sig, nil
}

package harmony

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/harmony/internal/cisecret"
	"github.com/nationtech/harmony-fleet/imagesig"
	"github.com/nationtech/harmony-fleet/imagesig/sigkeys"
)

// ErrSigningKey means the context's signing key cannot sign for it: it
// does not open with its passphrase, or its public key is not among the
// context's trusted keys (devices would refuse every image).
var ErrSigningKey = errors.New("harmony: signing key")

// maxTransitVersions is how many of a transit key's newest versions a
// context without TrustedKeys trusts (spec.signatures holds 1 to 8 keys).
const maxTransitVersions = 8

// imageSigner is how a context signs: through OpenBao transit, or with the
// key file read from KV.
type imageSigner struct {
	// publicKey is the PEM public key of the key (version) that signs.
	publicKey string
	// where names the key in messages (an OpenBao path).
	where   string
	transit *cisecret.TransitKey
	file    *cisecret.SigningKey
}

// signingKey prepares the context's signing when it signs (nil when it
// does not) and checks, before anything is built, that the key that will
// sign is one of Signing.TrustedKeys. With no TrustedKeys, hc's (a
// copy's) become the key's public keys: the key file's, named
// <context>-signing, or every version's of the transit key (the newest
// 8), named <context>-signing-v<version>.
func signingKey(ctx context.Context, sess *cisecret.Session, hc *Context) (*imageSigner, error) {
	if hc.Signing == nil {
		return nil, nil
	}
	var s imageSigner
	var derived []TrustedKey
	if name := hc.Signing.TransitKey; name != "" {
		k, err := sess.TransitKey(ctx, hc.OpenBao.TransitMount, name)
		if err != nil {
			return nil, err
		}
		s.transit, s.where = k, "transit key "+hc.OpenBao.TransitMount+"/keys/"+name
		s.publicKey = k.PublicKeys[k.Latest]
		for v := max(1, k.Latest-maxTransitVersions+1); v <= k.Latest; v++ {
			if pub, ok := k.PublicKeys[v]; ok {
				derived = append(derived, TrustedKey{Name: fmt.Sprintf("%s-signing-v%d", hc.Name, v), PublicKey: pub})
			}
		}
		if _, err := sigkeys.KeyID(s.publicKey); err != nil {
			return nil, fmt.Errorf("%w: OpenBao %s: version %d: %w (want an ecdsa-p256 key)", ErrSigningKey, s.where, k.Latest, err)
		}
	} else {
		key, err := sess.SigningKey(ctx, hc.OpenBao.SigningKey)
		if err != nil {
			return nil, err
		}
		pub, err := imagesig.SigningPublicKey(key.PrivateKey, key.Passphrase)
		if err != nil {
			return nil, fmt.Errorf("%w: OpenBao %s: %w", ErrSigningKey, hc.OpenBao.SigningKey, err)
		}
		s.file, s.where, s.publicKey = &key, hc.OpenBao.SigningKey, pub
		derived = []TrustedKey{{Name: hc.Name + "-signing", PublicKey: pub}}
	}
	if len(hc.Signing.TrustedKeys) == 0 {
		signing := *hc.Signing
		signing.TrustedKeys = derived
		hc.Signing = &signing
		return &s, nil
	}
	id, _ := sigkeys.KeyID(s.publicKey)
	trusted := trustedKeys(*hc)
	if !slices.ContainsFunc(trusted, func(k sigkeys.Key) bool { kid, _ := sigkeys.KeyID(k.PublicKey); return kid == id }) {
		var ids []string
		for _, k := range trusted {
			ids = append(ids, k.ID())
		}
		return nil, fmt.Errorf("%w: OpenBao %s holds the key %s, which is not among context %q's Signing.TrustedKeys (%s): "+
			"add its public key there (devices would refuse every image it signs), or store the right key",
			ErrSigningKey, s.where, id, hc.Name, strings.Join(ids, ", "))
	}
	return &s, nil
}

// sign signs the pushed image (repo@digest, pushed under tag) with s,
// unless the registry already holds a signature of that digest by the
// key that signs now (a re-run of the same commit adds none).
func sign(ctx context.Context, pushed, tag string, creds cisecret.RegistryCredentials, s imageSigner, log *slog.Logger) error {
	auth := &imagesig.Auth{Username: creds.Username, Password: creds.Password}
	_, digest, _ := strings.Cut(pushed, "@")
	v, err := imagesig.NewVerifier()
	if err != nil {
		return err
	}
	defer v.Close()
	own := []sigkeys.Key{{Name: "signing-key", PublicKey: s.publicKey}}
	start := time.Now()
	if err := v.Verify(ctx, imagesig.Request{Image: tag, Digest: digest, Keys: own, Auth: auth}); err == nil {
		log.InfoContext(ctx, "image already signed by this key", "image", pushed)
		return nil
	}
	opts := imagesig.SignOptions{Pushed: pushed, Tag: tag, Auth: auth}
	if s.transit != nil {
		opts.Signer, opts.SignerPublicKey = s.transit, s.publicKey
	} else {
		opts.PrivateKey, opts.Passphrase = s.file.PrivateKey, s.file.Passphrase
	}
	if err := imagesig.Sign(ctx, opts); err != nil {
		if errors.Is(err, imagesig.ErrSignerMismatch) {
			return fmt.Errorf("%w: OpenBao %s: %w: was the key rotated during the ship? ship again", ErrSigningKey, s.where, err)
		}
		return fmt.Errorf("harmony: %w", err)
	}
	if err := v.Verify(ctx, imagesig.Request{Image: tag, Digest: digest, Keys: own, Auth: auth}); err != nil {
		return fmt.Errorf("harmony: the signature just written does not verify: %w", err)
	}
	id, _ := sigkeys.KeyID(s.publicKey)
	log.InfoContext(ctx, "image signed", "image", pushed, "key", id, "with", s.where, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

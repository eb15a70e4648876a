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

// signingKey reads the context's signing key when it signs (nil when it
// does not) and checks, before anything is built, that it opens and that
// its public key is one of Signing.TrustedKeys. With no TrustedKeys, hc's
// (a copy's) become the signing key's public key alone, named
// <context>-signing.
func signingKey(ctx context.Context, sess *cisecret.Session, hc *Context) (*cisecret.SigningKey, error) {
	if hc.Signing == nil {
		return nil, nil
	}
	key, err := sess.SigningKey(ctx, hc.OpenBao.SigningKey)
	if err != nil {
		return nil, err
	}
	pub, err := imagesig.SigningPublicKey(key.PrivateKey, key.Passphrase)
	if err != nil {
		return nil, fmt.Errorf("%w: OpenBao %s: %w", ErrSigningKey, hc.OpenBao.SigningKey, err)
	}
	if len(hc.Signing.TrustedKeys) == 0 {
		hc.Signing = &Signing{TrustedKeys: []TrustedKey{{Name: hc.Name + "-signing", PublicKey: pub}}}
		return &key, nil
	}
	id, _ := sigkeys.KeyID(pub)
	trusted := trustedKeys(*hc)
	if !slices.ContainsFunc(trusted, func(k sigkeys.Key) bool { kid, _ := sigkeys.KeyID(k.PublicKey); return kid == id }) {
		var ids []string
		for _, k := range trusted {
			ids = append(ids, k.ID())
		}
		return nil, fmt.Errorf("%w: OpenBao %s holds the key %s, which is not among context %q's Signing.TrustedKeys (%s): "+
			"add its public key there (devices would refuse every image it signs), or store the right key",
			ErrSigningKey, hc.OpenBao.SigningKey, id, hc.Name, strings.Join(ids, ", "))
	}
	return &key, nil
}

// sign signs the pushed image (repo@digest, pushed under tag) with key,
// unless the registry already holds a signature of that digest by that
// key (a re-run of the same commit adds none).
func sign(ctx context.Context, pushed, tag string, creds cisecret.RegistryCredentials, key cisecret.SigningKey, log *slog.Logger) error {
	pub, err := imagesig.SigningPublicKey(key.PrivateKey, key.Passphrase)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrSigningKey, err)
	}
	auth := &imagesig.Auth{Username: creds.Username, Password: creds.Password}
	_, digest, _ := strings.Cut(pushed, "@")
	v, err := imagesig.NewVerifier()
	if err != nil {
		return err
	}
	defer v.Close()
	own := []sigkeys.Key{{Name: "signing-key", PublicKey: pub}}
	start := time.Now()
	if err := v.Verify(ctx, imagesig.Request{Image: tag, Digest: digest, Keys: own, Auth: auth}); err == nil {
		log.InfoContext(ctx, "image already signed by this key", "image", pushed)
		return nil
	}
	if err := imagesig.Sign(ctx, imagesig.SignOptions{Pushed: pushed, Tag: tag, PrivateKey: key.PrivateKey, Passphrase: key.Passphrase, Auth: auth}); err != nil {
		return fmt.Errorf("harmony: %w", err)
	}
	if err := v.Verify(ctx, imagesig.Request{Image: tag, Digest: digest, Keys: own, Auth: auth}); err != nil {
		return fmt.Errorf("harmony: the signature just written does not verify: %w", err)
	}
	id, _ := sigkeys.KeyID(pub)
	log.InfoContext(ctx, "image signed", "image", pushed, "key", id, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

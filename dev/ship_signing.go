package dev

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/nationtech/harmony-fleet/imagesig"
)

// The dev context signs what it ships (ADR 0023, docs/ci.md): fleet dev
// keeps a signing key in <data>/secrets (made once, kept across runs, so
// images signed before a restart stay trusted) and stores it at the KV
// path harmony reads (harmony/<namespace>/dev/signing-key); the reference
// program's dev context sets Signing with no TrustedKeys, so its
// Deployment trusts that key only.
const (
	// ShipSigningKeyFileName is the encrypted signing key's file in
	// <data>/secrets (mode 0600); ShipSigningPassFileName its
	// passphrase's.
	ShipSigningKeyFileName  = "harmony-signing.key"
	ShipSigningPassFileName = "harmony-signing.pass"
	// ShipSigningKeyName is the dev context's name for the key, as a
	// device's reasons show it (harmony names a key it trusts from the
	// signing key <context>-signing).
	ShipSigningKeyName = ShipContext + "-signing"
)

// shipSigningKey makes the dev context's signing key on the first run and
// stores it at the signing-key path of the stand-in.
func (s *session) shipSigningKey(ctx context.Context) error {
	pass, err := loadOrCreate(filepath.Join(s.sec.dir, ShipSigningPassFileName), randomHex)
	if err != nil {
		return err
	}
	priv, err := loadOrCreate(filepath.Join(s.sec.dir, ShipSigningKeyFileName), func() (string, error) {
		priv, _, err := imagesig.GenerateSigningKey([]byte(pass))
		return string(priv), err
	})
	if err != nil {
		return fmt.Errorf("fleet dev: image signing key: %w", err)
	}
	_, err = imagesig.SigningPublicKey([]byte(priv), []byte(pass))
	if err != nil {
		return fmt.Errorf("fleet dev: image signing key in %s: %w: delete it and %s to get a new pair",
			filepath.Join(s.sec.dir, ShipSigningKeyFileName), err, ShipSigningPassFileName)
	}
	if err := s.bs.admin.Write(ctx, shipPath(s.o.Namespace, "signing-key"), map[string]any{"privateKey": priv, "passphrase": pass}); err != nil {
		return fmt.Errorf("fleet dev: OpenBao stand-in: signing key: %w", err)
	}
	return nil
}

// HarmonyBuildTags are the build tags a harmony program is built with: its
// signing links containers/image's signature code, which without the tag
// needs the GPGME C library.
const HarmonyBuildTags = "containers_image_openpgp"

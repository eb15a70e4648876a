package dev

import (
	"context"
	"fmt"
)

// The dev context signs what it ships (ADR 0023, docs/ci.md) through the
// stand-in's transit engine, as production does through OpenBao's: fleet
// dev enables transit at transit/, makes the ecdsa-p256 key
// ShipTransitKey(namespace) (not exportable) and lets the CI role sign
// with it and read its public keys, never the key itself. The reference
// program's dev context sets Signing{TransitKey} with no TrustedKeys, so
// its Deployment trusts the key's versions only. The stand-in keeps
// everything in memory: each run has a new key, and the first ship after
// a restart signs again (running revisions keep the keys they were
// released with, and their signatures stay in the registry).
const (
	// ShipTransitMount is the stand-in's transit mount.
	ShipTransitMount = "transit"
	// ShipSigningKeyName is the dev context's name for the key's first
	// version, as a device's reasons show it (harmony names the trusted
	// versions of a transit key <context>-signing-v<version>).
	ShipSigningKeyName = ShipContext + "-signing-v1"
)

// ShipTransitKey is the transit key the dev context of namespace signs
// with.
func ShipTransitKey(namespace string) string { return "harmony-" + namespace + "-dev" }

// shipTransitPolicy is the CI role's transit rules: sign with the key and
// read its public keys (docs/ci.md, "Signing images").
func shipTransitPolicy(namespace string) string {
	k := ShipTransitKey(namespace)
	return fmt.Sprintf("path %q { capabilities = [\"update\"] }\npath %q { capabilities = [\"read\"] }\n",
		ShipTransitMount+"/sign/"+k, ShipTransitMount+"/keys/"+k)
}

// shipSigningKey enables the stand-in's transit engine and makes the dev
// context's signing key there.
func (s *session) shipSigningKey(ctx context.Context) error {
	if err := s.bs.admin.EnableTransit(ctx, ShipTransitMount); err != nil {
		return fmt.Errorf("fleet dev: OpenBao stand-in: enable transit: %w", err)
	}
	if err := s.bs.admin.TransitCreateKey(ctx, ShipTransitMount, ShipTransitKey(s.o.Namespace)); err != nil {
		return fmt.Errorf("fleet dev: OpenBao stand-in: image signing key: %w", err)
	}
	return nil
}

// HarmonyBuildTags are the build tags a harmony program is built with: its
// signing links containers/image's signature code, which without the tag
// needs the GPGME C library.
const HarmonyBuildTags = "containers_image_openpgp"

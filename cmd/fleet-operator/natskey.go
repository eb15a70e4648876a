package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/identity/credential"
)

// natsKey is the operator's NATS identity in production: a machine key of
// the identity provider holding the role fleet-operator; the operator
// presents a fresh id_token on every connect and the auth callout places it
// in the control-plane account (docs/security.md).
type natsKey struct {
	file, issuer, audience *string
}

// natsKeyFlags binds --nats-key-file and --audience, and --oidc-issuer
// unless the command binds its own issuer flag (serve-web signs users in
// at the same provider) and passes it as issuer.
func natsKeyFlags(fs *flag.FlagSet, issuer *string) natsKey {
	if issuer == nil {
		issuer = fs.String("oidc-issuer", os.Getenv("FLEET_OIDC_ISSUER"),
			"issuer URL of the identity provider the key belongs to ($FLEET_OIDC_ISSUER; default: the key file's issuer)")
	}
	return natsKey{
		file: fs.String("nats-key-file", os.Getenv("FLEET_NATS_KEY_FILE"),
			"machine key file (Zitadel JSON key) of the operator's identity, role fleet-operator: connect through the auth callout with its id_token ($FLEET_NATS_KEY_FILE)"),
		issuer: issuer,
		audience: fs.String("audience", os.Getenv("FLEET_AUDIENCE"),
			"Fleet project id the id_token must name in its audience ($FLEET_AUDIENCE; default: the key file's audience)"),
	}
}

// options returns the nats.go options that connect with the key's
// id_token, or none without --nats-key-file.
func (k natsKey) options(ctx context.Context, haveCreds bool, log *slog.Logger) ([]nats.Option, error) {
	if *k.file == "" {
		return nil, nil
	}
	if haveCreds {
		return nil, errors.New("--nats-key-file and --nats-creds are both set: give one NATS identity")
	}
	key, err := credential.ReadKeyFile(*k.file)
	if err != nil {
		return nil, fmt.Errorf("--nats-key-file: %w", err)
	}
	issuer := cmp.Or(*k.issuer, key.Issuer)
	if issuer == "" {
		return nil, errors.New("--oidc-issuer is empty and the key file names no issuer: give the identity provider's issuer URL")
	}
	// Discovery is deferred: the operator starts while the provider is
	// unreachable, and nats.go retries the connect.
	src, err := credential.New(ctx, credential.Options{Issuer: issuer, Key: key, Audience: cmp.Or(*k.audience, key.Audience),
		Logger: log, DeferDiscovery: true})
	if err != nil {
		return nil, fmt.Errorf("--nats-key-file: %w", err)
	}
	return []nats.Option{nats.TokenHandler(src.TokenHandler(0)), nats.CustomInboxPrefix(credential.InboxPrefix(src.Subject()))}, nil
}

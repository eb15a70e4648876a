package dev

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nationtech/harmony-fleet/authcallout"
)

// devAdminUser is fleet dev's only addition to the documented
// configuration: a static admin user in FLEET for the nats CLI, which
// bypasses the callout.
const devAdminUser = "fleet-dev-admin"

// serverConfig returns the server configuration fleet dev runs: variable
// definitions for the documented $FLEET_... references (nats-server resolves
// them before the environment), the documented block, and the dev admin user.
func serverConfig(s *secrets) (string, error) {
	issuer, err := s.issuer.PublicKey()
	if err != nil {
		return "", fmt.Errorf("fleet dev: issuer key: %w", err)
	}
	xkey, err := s.xkey.PublicKey()
	if err != nil {
		return "", fmt.Errorf("fleet dev: xkey: %w", err)
	}
	return authcallout.ServerConfigWith(authcallout.ConfigVars{CalloutPassword: s.calloutPassword, ReaderPassword: s.readerPassword,
		SysPassword: s.sysPassword, PresencePassword: s.presencePassword, Issuer: issuer, XKey: xkey},
		&authcallout.StaticUser{Name: devAdminUser, Password: s.adminPassword, PasswordVar: "FLEET_DEV_ADMIN_PASSWORD",
			Comment: "fleet dev only: the nats CLI user, the whole FLEET account."})
}

// plaintextNotice starts the NATS server's warning about the plaintext
// passwords of its configuration: fleet dev's static users (the callout's,
// the admin's) have them on purpose, from 0600 files of the data folder,
// so the warning is noise at every start.
const plaintextNotice = "Plaintext passwords detected"

// quietPlaintext is a log handler that drops plaintextNotice and passes
// every other record on.
type quietPlaintext struct{ slog.Handler }

// Handle implements slog.Handler.
func (h quietPlaintext) Handle(ctx context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, plaintextNotice) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h quietPlaintext) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quietPlaintext{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h quietPlaintext) WithGroup(name string) slog.Handler {
	return quietPlaintext{h.Handler.WithGroup(name)}
}

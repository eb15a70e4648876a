package dev

import (
	"fmt"

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
		SysPassword: s.sysPassword, Issuer: issuer, XKey: xkey},
		&authcallout.StaticUser{Name: devAdminUser, Password: s.adminPassword, PasswordVar: "FLEET_DEV_ADMIN_PASSWORD",
			Comment: "fleet dev only: the nats CLI user, the whole FLEET account."})
}

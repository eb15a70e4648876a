package devenv

import (
	"fmt"
	"strings"
)

// calloutConfig is the NATS configuration block of docs/security.md, byte for
// byte (a test checks): fleet dev runs exactly the documented wiring.
const calloutConfig = `# fleet-authcallout: NATS server configuration
accounts {
  # The callout's own account: the callout service connects here and
  # answers $SYS.REQ.USER.AUTH.
  AUTH {
    users: [ { user: "fleet-authcallout", password: $FLEET_CALLOUT_PASSWORD } ]
  }
  # Everything Fleet: streams, KV buckets, devices, the operator.
  FLEET {
    jetstream: enabled
    users: [
      # The callout reads fleet-identity with this user, and nothing else.
      # It also follows changes ($KV.fleet-identity.>) to disconnect
      # devices that are quarantined while connected.
      { user: "fleet-identity-reader", password: $FLEET_READER_PASSWORD,
        permissions: {
          publish: { allow: ["$JS.API.STREAM.INFO.KV_fleet-identity", "$JS.API.DIRECT.GET.KV_fleet-identity.>"] }
          subscribe: { allow: ["_INBOX_fleet-identity-reader.>", "$KV.fleet-identity.>"] }
        } }
    ]
  }
  SYS {
    # The callout disconnects (kicks) live connections of quarantined
    # devices with this user, and may do nothing else.
    users: [
      { user: "fleet-authcallout-sys", password: $FLEET_CALLOUT_SYS_PASSWORD,
        permissions: {
          publish: { allow: ["$SYS.REQ.SERVER.*.KICK"] }
          subscribe: { allow: ["_INBOX_fleet-authcallout-sys.>"] }
        } }
    ]
  }
}
system_account: SYS
authorization {
  # Seconds a client may take to authenticate, callout included.
  timeout: 5
  auth_callout {
    # Public account nkey (A...) of the key that signs user JWTs.
    issuer: $FLEET_CALLOUT_ISSUER
    account: AUTH
    # These users bypass the callout (they are the callout itself).
    auth_users: [ "fleet-authcallout", "fleet-identity-reader", "fleet-authcallout-sys" ]
    # Public curve key (X...): requests and responses are encrypted.
    xkey: $FLEET_CALLOUT_XKEY
  }
}
`

// Dev-only additions to the documented configuration: a static admin user
// in FLEET for the nats CLI, which bypasses the callout.
const (
	devAdminUser     = "fleet-dev-admin"
	fleetUsersAnchor = "  FLEET {\n    jetstream: enabled\n    users: [\n"
	authUsersAnchor  = `auth_users: [ "fleet-authcallout", `
)

// serverConfig returns the server configuration fleet dev runs: variable
// definitions for the documented $FLEET_... references (nats-server resolves
// them before the environment), the documented block, and the dev admin user.
func serverConfig(s *secrets) (string, error) {
	conf := calloutConfig
	if strings.Count(conf, fleetUsersAnchor) != 1 || strings.Count(conf, authUsersAnchor) != 1 {
		return "", fmt.Errorf("fleet dev: the documented NATS configuration changed shape: update internal/devenv/natsconf.go")
	}
	conf = strings.Replace(conf, fleetUsersAnchor, fleetUsersAnchor+
		"      # fleet dev only: the nats CLI user, the whole FLEET account.\n"+
		"      { user: \""+devAdminUser+"\", password: $FLEET_DEV_ADMIN_PASSWORD }\n", 1)
	conf = strings.Replace(conf, authUsersAnchor, `auth_users: [ "`+devAdminUser+`", "fleet-authcallout", `, 1)
	issuer, err := s.issuer.PublicKey()
	if err != nil {
		return "", fmt.Errorf("fleet dev: issuer key: %w", err)
	}
	xkey, err := s.xkey.PublicKey()
	if err != nil {
		return "", fmt.Errorf("fleet dev: xkey: %w", err)
	}
	vars := fmt.Sprintf("FLEET_CALLOUT_PASSWORD: %q\nFLEET_READER_PASSWORD: %q\nFLEET_CALLOUT_SYS_PASSWORD: %q\n"+
		"FLEET_DEV_ADMIN_PASSWORD: %q\nFLEET_CALLOUT_ISSUER: %q\nFLEET_CALLOUT_XKEY: %q\n\n",
		s.calloutPassword, s.readerPassword, s.sysPassword, s.adminPassword, issuer, xkey)
	return vars + conf, nil
}

package authcallout

import (
	"fmt"
	"strings"
)

// ServerConfig is the NATS server configuration block of docs/security.md,
// byte for byte (a test checks): the auth callout wiring every Fleet server
// runs. It refers to the $FLEET_… variables of ConfigVars.
const ServerConfig = `# fleet-authcallout: NATS server configuration
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

// ConfigVars are the values of the variables ServerConfig refers to.
type ConfigVars struct {
	CalloutPassword string // $FLEET_CALLOUT_PASSWORD
	ReaderPassword  string // $FLEET_READER_PASSWORD
	SysPassword     string // $FLEET_CALLOUT_SYS_PASSWORD
	Issuer          string // $FLEET_CALLOUT_ISSUER: public account nkey
	XKey            string // $FLEET_CALLOUT_XKEY: public curve key
}

// StaticUser is a user of the whole FLEET account that bypasses the
// callout: the nats CLI user of fleet dev, the scale benchmark's floor
// clients. Production has none.
type StaticUser struct {
	Name     string
	Password string
	// PasswordVar is the variable the configuration names the password by.
	PasswordVar string
	// Comment says what the user is for, in the configuration.
	Comment string
}

// Anchors a static user is inserted at.
const (
	fleetUsersAnchor = "  FLEET {\n    jetstream: enabled\n    users: [\n"
	authUsersAnchor  = `auth_users: [ "fleet-authcallout", `
)

// ServerConfigWith returns a complete server configuration: definitions of
// the documented variables (nats-server resolves them before the
// environment, so nothing is taken from it), ServerConfig, and the static
// user when one is given.
func ServerConfigWith(v ConfigVars, static *StaticUser) (string, error) {
	conf := ServerConfig
	vars := fmt.Sprintf("FLEET_CALLOUT_PASSWORD: %q\nFLEET_READER_PASSWORD: %q\nFLEET_CALLOUT_SYS_PASSWORD: %q\n"+
		"FLEET_CALLOUT_ISSUER: %q\nFLEET_CALLOUT_XKEY: %q\n", v.CalloutPassword, v.ReaderPassword, v.SysPassword, v.Issuer, v.XKey)
	if static != nil {
		if strings.Count(conf, fleetUsersAnchor) != 1 || strings.Count(conf, authUsersAnchor) != 1 {
			return "", fmt.Errorf("authcallout: the documented NATS configuration changed shape: update ServerConfigWith")
		}
		conf = strings.Replace(conf, fleetUsersAnchor, fleetUsersAnchor+
			"      # "+static.Comment+"\n"+
			"      { user: \""+static.Name+"\", password: $"+static.PasswordVar+" }\n", 1)
		conf = strings.Replace(conf, authUsersAnchor, `auth_users: [ "`+static.Name+`", "fleet-authcallout", `, 1)
		vars += fmt.Sprintf("%s: %q\n", static.PasswordVar, static.Password)
	}
	return vars + "\n" + conf, nil
}

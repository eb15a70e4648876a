package scalebench

import (
	"fmt"
	"strings"

	"github.com/nats-io/nkeys"
)

// calloutConfig is the NATS configuration block of docs/security.md, byte for
// byte (a test checks): the benchmark runs exactly the documented wiring.
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

// floorUser is a static FLEET user that bypasses the callout: the raw
// floor's plain subscribers and publisher connect with it. Devices never do.
const floorUser = "scalebench-floor"

// Anchors the floor user is inserted at.
const (
	fleetUsersAnchor = "  FLEET {\n    jetstream: enabled\n    users: [\n"
	authUsersAnchor  = `auth_users: [ "fleet-authcallout", `
)

// secrets are the run's generated passwords and keys; they live only in
// memory and in the children's environment.
type secrets struct {
	calloutPassword, readerPassword, sysPassword, floorPassword string
	issuer, xkey                                                nkeys.KeyPair
}

// newSecrets generates fresh passwords and keys.
func newSecrets() (*secrets, error) {
	s := &secrets{calloutPassword: randomToken(), readerPassword: randomToken(), sysPassword: randomToken(), floorPassword: randomToken()}
	var err error
	if s.issuer, err = nkeys.CreateAccount(); err != nil {
		return nil, fmt.Errorf("scalebench: issuer key: %w", err)
	}
	if s.xkey, err = nkeys.CreateCurveKeys(); err != nil {
		return nil, fmt.Errorf("scalebench: xkey: %w", err)
	}
	return s, nil
}

// serverConfig is the documented configuration plus the floor user, with
// the documented $FLEET_... variables defined in front of it.
func serverConfig(s *secrets) (string, error) {
	conf := calloutConfig
	if strings.Count(conf, fleetUsersAnchor) != 1 || strings.Count(conf, authUsersAnchor) != 1 {
		return "", fmt.Errorf("scalebench: the documented NATS configuration changed shape: update internal/scalebench/natsconf.go")
	}
	conf = strings.Replace(conf, fleetUsersAnchor, fleetUsersAnchor+
		"      # scalebench only: the raw floor's plain clients.\n"+
		"      { user: \""+floorUser+"\", password: $SCALEBENCH_FLOOR_PASSWORD }\n", 1)
	conf = strings.Replace(conf, authUsersAnchor, `auth_users: [ "`+floorUser+`", "fleet-authcallout", `, 1)
	issuer, err := s.issuer.PublicKey()
	if err != nil {
		return "", fmt.Errorf("scalebench: issuer key: %w", err)
	}
	xkey, err := s.xkey.PublicKey()
	if err != nil {
		return "", fmt.Errorf("scalebench: xkey: %w", err)
	}
	vars := fmt.Sprintf("FLEET_CALLOUT_PASSWORD: %q\nFLEET_READER_PASSWORD: %q\nFLEET_CALLOUT_SYS_PASSWORD: %q\n"+
		"SCALEBENCH_FLOOR_PASSWORD: %q\nFLEET_CALLOUT_ISSUER: %q\nFLEET_CALLOUT_XKEY: %q\n\n",
		s.calloutPassword, s.readerPassword, s.sysPassword, s.floorPassword, issuer, xkey)
	return vars + conf, nil
}

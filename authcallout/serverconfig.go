package authcallout

import (
	"fmt"
	"strings"
	"time"
)

// The ping settings of ServerConfig (a test checks they are its lines).
const (
	// PingInterval is how long a client may send nothing before its
	// server PINGs it.
	PingInterval = 20 * time.Second
	// PingMax is how many unanswered PINGs a server allows before it
	// closes the client as stale.
	PingMax = 2
	// StaleSilence is the least time a client closed as stale had sent
	// nothing: a server closes a client at the tick after its PingMax-th
	// unanswered PING, one interval apart. It usually skips the PING of
	// a client heard within the interval (then 60 to 80 s of silence),
	// but not when the client's round-trip time is due to be measured
	// (once an hour), so the bound is PingMax intervals (40 s).
	StaleSilence = PingInterval * PingMax
)

// ServerConfig is the NATS server configuration block of docs/security.md,
// byte for byte (a test checks): the auth callout wiring every Fleet server
// runs. It refers to the $FLEET_… variables of ConfigVars.
const ServerConfig = `# fleet-authcallout: NATS server configuration
# The CONNECT line carries the device's id_token: 8 KiB bounds the token a
# client may present (the default is 4 KiB).
max_control_line: 8192
# A connection is liveness (ADR 0032): a server PINGs a client that sent
# nothing for 20 s and closes it after 2 unanswered PINGs, so a silently
# dead device is disconnected within 60 to 80 s.
ping_interval: "20s"
ping_max: 2
accounts {
  # The callout's own account: the callout service connects here and
  # answers $SYS.REQ.USER.AUTH.
  AUTH {
    users: [ { user: "fleet-authcallout", password: $FLEET_CALLOUT_PASSWORD } ]
  }
  # The control plane: streams, KV buckets, the JetStream API, the operator.
  # No device is ever placed here.
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
    # Device reports, as a stream from the device account: the reports
    # and telemetry streams capture them here. Those two streams never
    # acknowledge (no_ack), so the reply subject a device sets on a report
    # is never answered in this account.
    imports: [
      { stream: { account: DEVICES, subject: "fleet.report.*.*" } }
      # Answers to logs requests (ADR 0025): no stream captures them and
      # nothing here answers them; a reader subscribes to its own
      # requests of one device.
      { stream: { account: DEVICES, subject: "fleet.logs.*.*.*" } }
    ]
    # Exactly what devices need, nothing else. Each device's user JWT
    # still limits it to its own subjects.
    exports: [
      # The subject-scoped direct get of one device's intent (never the
      # payload form, which cannot be scoped).
      { service: "$JS.API.DIRECT.GET.KV_fleet-intent.$KV.fleet-intent.*" }
      # Intent values as stored (the fleet-intent bucket republishes each
      # one there after storing it) and agent commands.
      { stream: "fleet.notify.intent.*" }
      { stream: "fleet.command.*" }
    ]
  }
  # Every device. JetStream disabled: a device reaches the control plane
  # only through its report export and these imports, and JetStream's
  # answers reach a device only through the direct get's reply mapping, so
  # a reply subject a device chooses can never name a stream, a KV key or
  # the JetStream API.
  DEVICES {
    # What one connection may cost: message size and subscriptions
    # (authcallout.DeviceMaxPayload, DeviceMaxSubs).
    limits: { max_payload: 131072, max_subscriptions: 16 }
    # Reports and answers to logs requests go to the control plane as
    # streams (imported by FLEET).
    exports: [
      { stream: "fleet.report.*.*" }
      { stream: "fleet.logs.*.*.*" }
    ]
    imports: [
      { service: { account: FLEET, subject: "$JS.API.DIRECT.GET.KV_fleet-intent.$KV.fleet-intent.*" } }
      { stream: { account: FLEET, subject: "fleet.notify.intent.*" } }
      { stream: { account: FLEET, subject: "fleet.command.*" } }
    ]
    # Inside this account a reply would reach every subscriber of the
    # subject its sender names: these send what a device publishes (or has
    # answered) on another device's notification or command subject
    # nowhere. Messages arriving through the imports are not re-mapped.
    mappings: {
      "fleet.notify.intent.*": "fleet.void.intent"
      "fleet.command.*": "fleet.void.command"
    }
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
      # The operator learns which devices are connected (ADR 0032): every
      # server's connect and disconnect events of the device account, and
      # its connection list of that account, nothing else.
      { user: "fleet-presence", password: $FLEET_PRESENCE_PASSWORD,
        permissions: {
          publish: { allow: ["$SYS.REQ.ACCOUNT.DEVICES.CONNZ"] }
          subscribe: { allow: ["$SYS.ACCOUNT.DEVICES.CONNECT", "$SYS.ACCOUNT.DEVICES.DISCONNECT",
            "$SYS.SERVER.*.SHUTDOWN", "_INBOX_fleet-presence.>"] }
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
    auth_users: [ "fleet-authcallout", "fleet-identity-reader", "fleet-authcallout-sys", "fleet-presence" ]
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
	// PresencePassword is fleet-presence's ($FLEET_PRESENCE_PASSWORD):
	// the operator's system-account user for device connections (ADR 0032).
	PresencePassword string
	Issuer           string // $FLEET_CALLOUT_ISSUER: public account nkey
	XKey             string // $FLEET_CALLOUT_XKEY: public curve key
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
		"FLEET_PRESENCE_PASSWORD: %q\nFLEET_CALLOUT_ISSUER: %q\nFLEET_CALLOUT_XKEY: %q\n", v.CalloutPassword, v.ReaderPassword, v.SysPassword,
		v.PresencePassword, v.Issuer, v.XKey)
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

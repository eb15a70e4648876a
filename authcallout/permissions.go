package authcallout

import (
	"fmt"

	"github.com/nats-io/jwt/v2"

	"github.com/nationtech/harmony-fleet/events"
)

// Roles recognised in the id_token's roles claim (RolesClaim). A token with
// a control-plane role is authorised by that role, not by fleet-identity.
const (
	// RoleOperator is the Fleet operator: the control plane, trusted with
	// the whole FLEET account.
	RoleOperator = "fleet-operator"
	// RoleShipper is CI (`harmony ship`): reads rollout and intent history
	// to wait for a revision, writes nothing.
	RoleShipper = "fleet-shipper"
)

// ReportKinds are the report kinds a device may publish; DevicePermissions
// allows events.ReportSubject(device, k) for each.
var ReportKinds = []events.ReportKind{
	events.ReportHeartbeat, events.ReportInventory, events.ReportWorkload, events.ReportTask, events.ReportCommand,
}

// InboxPrefix is the inbox prefix an identity must connect with
// (nats.CustomInboxPrefix): _INBOX_<name>, name being the device id or, for
// control-plane roles, the token subject.
func InboxPrefix(name string) string { return "_INBOX_" + name }

// DevicePermissions are exactly what a device may do:
//
//   - publish its reports: fleet.report.<device>.<kind> for each ReportKinds
//     (JetStream acks come back on its inbox);
//   - publish the subject-scoped direct get of its intent:
//     $JS.API.DIRECT.GET.KV_fleet-intent.$KV.fleet-intent.<device> (never the
//     payload form, which cannot be scoped);
//   - subscribe its intent key $KV.fleet-intent.<device>, its command
//     subject fleet.command.<device> and its inbox _INBOX_<device>.>.
//
// Nothing else: no other JetStream API, no wildcard beyond its own inbox.
func DevicePermissions(device string) (jwt.Permissions, error) {
	var p jwt.Permissions
	for _, k := range ReportKinds {
		s, err := events.ReportSubject(device, k)
		if err != nil {
			return jwt.Permissions{}, fmt.Errorf("authcallout: device permissions: %w", err)
		}
		p.Pub.Allow.Add(s)
	}
	dg, err := events.IntentDirectGetSubject(device)
	if err != nil {
		return jwt.Permissions{}, fmt.Errorf("authcallout: device permissions: %w", err)
	}
	kv, _ := events.IntentKVSubject(device)
	cmd, _ := events.CommandSubject(device)
	p.Pub.Allow.Add(dg)
	p.Sub.Allow.Add(kv, cmd, InboxPrefix(device)+".>")
	return p, nil
}

// OperatorPermissions: the operator is the control plane and may use every
// subject of the FLEET account (streams, KV, JetStream API).
func OperatorPermissions() jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(">")
	p.Sub.Allow.Add(">")
	return p
}

// readStreams are the streams the shipper may read.
var readStreams = []string{events.StreamRollout, events.StreamIntent}

// ShipperPermissions: CI may read the rollout and intent streams (stream
// info, ephemeral or ordered consumers, direct get) on its own inbox, and
// nothing else; it publishes no event.
func ShipperPermissions(subject string) (jwt.Permissions, error) {
	if err := events.ValidateToken(events.TokenIdentitySubject, subject); err != nil {
		return jwt.Permissions{}, fmt.Errorf("authcallout: shipper permissions: %w", err)
	}
	var p jwt.Permissions
	p.Pub.Allow.Add("$JS.API.INFO")
	for _, s := range readStreams {
		p.Pub.Allow.Add(
			"$JS.API.STREAM.INFO."+s,
			"$JS.API.CONSUMER.CREATE."+s+".>",
			"$JS.API.CONSUMER.INFO."+s+".>",
			"$JS.API.CONSUMER.DELETE."+s+".>",
			"$JS.API.CONSUMER.MSG.NEXT."+s+".>",
			"$JS.API.DIRECT.GET."+s+".>",
			"$JS.FC."+s+".>",
			"$JS.ACK."+s+".>",
		)
	}
	p.Sub.Allow.Add(InboxPrefix(subject) + ".>")
	return p, nil
}

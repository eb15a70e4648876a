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
	// the whole control-plane account (AccountFleet). It is the only role:
	// every other identity is a device, placed in AccountDevices.
	RoleOperator = "fleet-operator"
)

// The accounts of ServerConfig.
const (
	// AccountFleet is the control-plane account: streams, KV buckets, the
	// JetStream API, the operator.
	AccountFleet = "FLEET"
	// AccountDevices holds every device, with JetStream disabled; it
	// imports from AccountFleet exactly the subjects devices need.
	AccountDevices = "DEVICES"
)

// What one device may cost the server: the limits of the DEVICES account
// in ServerConfig (a test keeps them equal). They are account limits
// because the server ignores the limits of a user JWT that an auth callout
// issues; an account's max_payload and max_subscriptions apply to each of
// its connections. See docs/security.md, "What one device can cost".
const (
	// DeviceMaxPayload is the largest message a device may publish, in
	// bytes. The largest report an agent sends (an inventory of a device
	// with many containers) is a few KiB.
	DeviceMaxPayload = 128 * 1024
	// DeviceMaxSubs is how many subscriptions a device connection may hold:
	// the agent holds three (its intent notifications, its commands, its
	// request inbox).
	DeviceMaxSubs = 16
)

// ReportKinds are the report kinds a device may publish; DevicePermissions
// allows events.ReportSubject(device, k) for each.
var ReportKinds = []events.ReportKind{
	events.ReportHeartbeat, events.ReportInventory, events.ReportWorkload, events.ReportTask, events.ReportCommand,
	events.ReportHealth, events.ReportContainers, events.ReportFetch,
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
//   - publish answers to logs requests under its own device token:
//     fleet.logs.<device>.*.* (ADR 0025; the reader listens to exactly
//     its own requests' subjects of that device);
//   - subscribe its stored intent values fleet.notify.intent.<device> (the
//     bucket republishes each after storing it), its command subject
//     fleet.command.<device> and its inbox _INBOX_<device>.>.
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
	notify, _ := events.IntentNotifySubject(device)
	cmd, _ := events.CommandSubject(device)
	logs, _ := events.DeviceLogsPublish(device)
	p.Pub.Allow.Add(dg, logs)
	p.Sub.Allow.Add(notify, cmd, InboxPrefix(device)+".>")
	return p, nil
}

// OperatorPermissions: the operator is the control plane and may use every
// subject of the control-plane account (streams, KV, JetStream API).
func OperatorPermissions() jwt.Permissions {
	var p jwt.Permissions
	p.Pub.Allow.Add(">")
	p.Sub.Allow.Add(">")
	return p
}

package events

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Stream and bucket names. They are part of the contract: the nats CLI
// recipes in docs/ use them.
const (
	// StreamIntent holds Deployment and TaskRun intent: revisions and
	// deletions. History, append-only.
	StreamIntent = "FLEET_INTENT"
	// StreamRollout holds rollout transitions per Deployment. History,
	// append-only.
	StreamRollout = "FLEET_ROLLOUT"
	// StreamReports holds device reports that are history: workload status
	// per revision, workload health, task status and command results.
	StreamReports = "FLEET_REPORTS"
	// StreamTelemetry holds device reports of which only the last few per
	// subject matter: inventory and container state.
	StreamTelemetry = "FLEET_TELEMETRY"
	// StreamLiveness holds each device's last heartbeat, in memory: soft
	// state, never a stored, fsynced write per beat (ADR 0024).
	StreamLiveness = "FLEET_LIVENESS"
	// StreamCommands holds agent commands, an audit trail of what was asked
	// of each device.
	StreamCommands = "FLEET_COMMANDS"
	// StreamAudit holds what operators did through the dashboard:
	// quarantines, releases, agent commands asked and alert
	// acknowledgements, each naming the user. History, append-only; the
	// dashboard's alert acknowledgements are the last event of each alert
	// subject.
	StreamAudit = "FLEET_AUDIT"

	// BucketIntent is the KV projection of per-device desired state: one key
	// per device.
	BucketIntent = "fleet-intent"
	// BucketIdentity is the KV projection of Device CRs: identity subject →
	// device id and quarantine flag.
	BucketIdentity = "fleet-identity"
	// BucketOperatorState is an object store for the operator's own state:
	// the rollout runner's checkpoint (its folds and the stream positions
	// they cover). Losing it costs a rebuild from the first event, nothing
	// else.
	BucketOperatorState = "fleet-operator-state"
)

// Subject roots. Every family has a fixed token count and a kind token.
const (
	rootIntent  = "fleet.intent"
	rootRollout = "fleet.rollout"
	rootReport  = "fleet.report"
	rootCommand = "fleet.command"
	rootAudit   = "fleet.dashboard"

	kindDeployment = "deployment"
	kindTaskRun    = "taskrun"
	kindDevice     = "device"
	kindAlert      = "alert"
)

// ReportKind is the last token of a device report subject.
type ReportKind string

// Report kinds.
const (
	ReportHeartbeat ReportKind = "heartbeat"
	ReportInventory ReportKind = "inventory"
	ReportWorkload  ReportKind = "workload"
	ReportTask      ReportKind = "task"
	ReportCommand   ReportKind = "command"
	// ReportHealth carries a device's Degraded and Recovered reports of a
	// Deployment revision (stream FLEET_REPORTS).
	ReportHealth ReportKind = "health"
	// ReportContainers carries a device's container state snapshot
	// (stream FLEET_TELEMETRY).
	ReportContainers ReportKind = "containers"
	// ReportFetch carries a device's fetch-ahead progress of a revision's
	// images (stream FLEET_REPORTS, ADR 0027).
	ReportFetch ReportKind = "fetch"
)

// reportKinds lists every report kind in catalogue order.
var reportKinds = []ReportKind{ReportHeartbeat, ReportInventory, ReportWorkload, ReportTask, ReportCommand, ReportHealth, ReportContainers, ReportFetch}

// Valid reports whether k is a known report kind.
func (k ReportKind) Valid() bool {
	for _, v := range reportKinds {
		if k == v {
			return true
		}
	}
	return false
}

// Family names a subject family: a fixed shape of subject.
type Family string

// Subject families.
const (
	// FamilyDeploymentIntent: fleet.intent.deployment.<namespace>.<name>
	FamilyDeploymentIntent Family = "deployment-intent"
	// FamilyTaskRunIntent: fleet.intent.taskrun.<namespace>.<name>
	FamilyTaskRunIntent Family = "taskrun-intent"
	// FamilyDeploymentRollout: fleet.rollout.deployment.<namespace>.<name>
	FamilyDeploymentRollout Family = "deployment-rollout"
	// FamilyReport: fleet.report.<device>.<kind>
	FamilyReport Family = "report"
	// FamilyCommand: fleet.command.<device>
	FamilyCommand Family = "command"
	// FamilyDashboardDevice: fleet.dashboard.device.<device>
	FamilyDashboardDevice Family = "dashboard-device"
	// FamilyDashboardAlert: fleet.dashboard.alert.<name>, name being the
	// alert's key (AlertKey).
	FamilyDashboardAlert Family = "dashboard-alert"
	// FamilyDeviceLogs: fleet.logs.<device>.<reader>.<request>, a device's
	// answer to a logs request (LogsSubject). Never stored; no event type
	// is of this family.
	FamilyDeviceLogs Family = "device-logs"
)

// Keys are the subject keys of an event: the tokens its subject is built
// from. Which are required depends on the type's family.
type Keys struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Device    string `json:"device,omitempty"`
}

// Subject builds the subject of family f (and report kind k for
// FamilyReport) from the keys, validating every token.
func (k Keys) Subject(f Family, rk ReportKind) (string, error) {
	switch f {
	case FamilyDeploymentIntent:
		return DeploymentIntentSubject(k.Namespace, k.Name)
	case FamilyTaskRunIntent:
		return TaskRunIntentSubject(k.Namespace, k.Name)
	case FamilyDeploymentRollout:
		return DeploymentRolloutSubject(k.Namespace, k.Name)
	case FamilyReport:
		return ReportSubject(k.Device, rk)
	case FamilyCommand:
		return CommandSubject(k.Device)
	case FamilyDashboardDevice:
		return DashboardDeviceSubject(k.Device)
	case FamilyDashboardAlert:
		return DashboardAlertSubject(k.Name)
	case FamilyDeviceLogs:
		return "", fmt.Errorf("%w: a logs subject needs its reader and request ids: use LogsSubject", ErrInvalidSubject)
	}
	return "", fmt.Errorf("%w: unknown family %q", ErrInvalidSubject, f)
}

func nsName(root, kind, namespace, name string) (string, error) {
	if err := ValidateToken(TokenNamespace, namespace); err != nil {
		return "", err
	}
	if err := ValidateToken(TokenName, name); err != nil {
		return "", err
	}
	return root + "." + kind + "." + namespace + "." + name, nil
}

// DeploymentIntentSubject is fleet.intent.deployment.<namespace>.<name>.
func DeploymentIntentSubject(namespace, name string) (string, error) {
	return nsName(rootIntent, kindDeployment, namespace, name)
}

// TaskRunIntentSubject is fleet.intent.taskrun.<namespace>.<name>.
func TaskRunIntentSubject(namespace, name string) (string, error) {
	return nsName(rootIntent, kindTaskRun, namespace, name)
}

// DeploymentRolloutSubject is fleet.rollout.deployment.<namespace>.<name>.
func DeploymentRolloutSubject(namespace, name string) (string, error) {
	return nsName(rootRollout, kindDeployment, namespace, name)
}

// ReportSubject is fleet.report.<device>.<kind>.
func ReportSubject(device string, kind ReportKind) (string, error) {
	if err := ValidateToken(TokenDevice, device); err != nil {
		return "", err
	}
	if !kind.Valid() {
		return "", fmt.Errorf("%w: report kind %q is not one of %v", ErrInvalidSubject, kind, reportKinds)
	}
	return rootReport + "." + device + "." + string(kind), nil
}

// DeviceReportsFilter is fleet.report.<device>.>: every report of one device,
// across the reports and telemetry streams (use it with core NATS, or with one
// stream at a time).
func DeviceReportsFilter(device string) (string, error) {
	if err := ValidateToken(TokenDevice, device); err != nil {
		return "", err
	}
	return rootReport + "." + device + ".>", nil
}

// CommandSubject is fleet.command.<device>: agent commands for one device.
func CommandSubject(device string) (string, error) {
	if err := ValidateToken(TokenDevice, device); err != nil {
		return "", err
	}
	return rootCommand + "." + device, nil
}

// DashboardDeviceSubject is fleet.dashboard.device.<device>: what operators
// did to one device through the dashboard.
func DashboardDeviceSubject(device string) (string, error) {
	if err := ValidateToken(TokenDevice, device); err != nil {
		return "", err
	}
	return rootAudit + "." + kindDevice + "." + device, nil
}

// DashboardAlertSubject is fleet.dashboard.alert.<key>: the
// acknowledgements of one alert, key being AlertKey of the alert's id.
func DashboardAlertSubject(key string) (string, error) {
	if err := ValidateToken(TokenName, key); err != nil {
		return "", err
	}
	return rootAudit + "." + kindAlert + "." + key, nil
}

// DashboardAlertsFilter is fleet.dashboard.alert.*: every alert's
// acknowledgements.
const DashboardAlertsFilter = rootAudit + "." + kindAlert + ".*"

// AlertKey is the subject token of an alert id: "a" and the first 31 hex
// digits of its SHA-256, so any id (whatever characters it holds) maps to
// one valid token. The id itself travels in the event's data.
func AlertKey(alertID string) string {
	sum := sha256.Sum256([]byte(alertID))
	return "a" + hex.EncodeToString(sum[:])[:31]
}

// IntentKey is the fleet-intent KV key of a device: the device id itself.
func IntentKey(device string) (string, error) {
	if err := ValidateToken(TokenDevice, device); err != nil {
		return "", err
	}
	return device, nil
}

// IntentKVSubject is $KV.fleet-intent.<device>, the subject a device's intent
// value is stored on (agents follow IntentNotifySubject, where the bucket
// republishes it once stored).
func IntentKVSubject(device string) (string, error) {
	key, err := IntentKey(device)
	if err != nil {
		return "", err
	}
	return "$KV." + BucketIntent + "." + key, nil
}

// rootIntentNotify is where the fleet-intent bucket republishes each value
// once stored (IntentNotifySubject).
const rootIntentNotify = "fleet.notify.intent"

// IntentNotifySubject is fleet.notify.intent.<device>: the fleet-intent
// bucket republishes each of the device's values there once JetStream has
// stored it, with the stream's headers (Nats-Subject, Nats-Sequence). Agents
// subscribe to it to follow changes; no stream captures it.
func IntentNotifySubject(device string) (string, error) {
	key, err := IntentKey(device)
	if err != nil {
		return "", err
	}
	return rootIntentNotify + "." + key, nil
}

// IntentDirectGetSubject is the subject-scoped direct get of a device's intent
// value: $JS.API.DIRECT.GET.KV_fleet-intent.$KV.fleet-intent.<device>. The
// auth callout permits exactly this subject to a device; the payload form of
// direct get ($JS.API.DIRECT.GET.KV_fleet-intent) cannot be scoped and is
// never permitted.
func IntentDirectGetSubject(device string) (string, error) {
	kv, err := IntentKVSubject(device)
	if err != nil {
		return "", err
	}
	return "$JS.API.DIRECT.GET.KV_" + BucketIntent + "." + kv, nil
}

// IdentityKey is the fleet-identity KV key of an OIDC identity subject (the
// machine user's id).
func IdentityKey(identitySubject string) (string, error) {
	if err := ValidateToken(TokenIdentitySubject, identitySubject); err != nil {
		return "", err
	}
	return identitySubject, nil
}

// Ref is a parsed Fleet subject.
type Ref struct {
	Family Family
	Keys   Keys
	// Report is the report kind, set for FamilyReport only.
	Report ReportKind
	// Reader and Request are the ids of a FamilyDeviceLogs subject.
	Reader, Request string
}

// Subject rebuilds the subject the Ref was parsed from.
func (r Ref) Subject() (string, error) {
	if r.Family == FamilyDeviceLogs {
		return LogsSubject(r.Keys.Device, r.Reader, r.Request)
	}
	return r.Keys.Subject(r.Family, r.Report)
}

// ParseSubject parses any Fleet event subject, validating every token.
func ParseSubject(subject string) (Ref, error) {
	bad := func(why string) (Ref, error) {
		return Ref{}, fmt.Errorf("%w %q: %s", ErrInvalidSubject, subject, why)
	}
	t := strings.Split(subject, ".")
	if len(t) < 3 || t[0] != "fleet" {
		return bad("must start with fleet.intent, fleet.rollout, fleet.report, fleet.command, fleet.dashboard or fleet.logs")
	}
	var ref Ref
	switch t[1] {
	case "intent", "rollout":
		if len(t) != 5 {
			return bad("must have 5 tokens: fleet." + t[1] + ".<kind>.<namespace>.<name>")
		}
		switch {
		case t[1] == "intent" && t[2] == kindDeployment:
			ref.Family = FamilyDeploymentIntent
		case t[1] == "intent" && t[2] == kindTaskRun:
			ref.Family = FamilyTaskRunIntent
		case t[1] == "rollout" && t[2] == kindDeployment:
			ref.Family = FamilyDeploymentRollout
		default:
			return bad("unknown kind token " + t[2])
		}
		ref.Keys = Keys{Namespace: t[3], Name: t[4]}
		if err := ValidateToken(TokenNamespace, t[3]); err != nil {
			return Ref{}, err
		}
		if err := ValidateToken(TokenName, t[4]); err != nil {
			return Ref{}, err
		}
	case "report":
		if len(t) != 4 {
			return bad("must have 4 tokens: fleet.report.<device>.<kind>")
		}
		if err := ValidateToken(TokenDevice, t[2]); err != nil {
			return Ref{}, err
		}
		if !ReportKind(t[3]).Valid() {
			return bad("unknown report kind " + t[3])
		}
		ref = Ref{Family: FamilyReport, Keys: Keys{Device: t[2]}, Report: ReportKind(t[3])}
	case "command":
		if len(t) != 3 {
			return bad("must have 3 tokens: fleet.command.<device>")
		}
		if err := ValidateToken(TokenDevice, t[2]); err != nil {
			return Ref{}, err
		}
		ref = Ref{Family: FamilyCommand, Keys: Keys{Device: t[2]}}
	case "dashboard":
		if len(t) != 4 {
			return bad("must have 4 tokens: fleet.dashboard.<kind>.<key>")
		}
		switch t[2] {
		case kindDevice:
			if err := ValidateToken(TokenDevice, t[3]); err != nil {
				return Ref{}, err
			}
			ref = Ref{Family: FamilyDashboardDevice, Keys: Keys{Device: t[3]}}
		case kindAlert:
			if err := ValidateToken(TokenName, t[3]); err != nil {
				return Ref{}, err
			}
			ref = Ref{Family: FamilyDashboardAlert, Keys: Keys{Name: t[3]}}
		default:
			return bad("unknown kind token " + t[2])
		}
	case "logs":
		if len(t) != 5 {
			return bad("must have 5 tokens: fleet.logs.<device>.<reader>.<request>")
		}
		if _, err := LogsSubject(t[2], t[3], t[4]); err != nil {
			return Ref{}, err
		}
		ref = Ref{Family: FamilyDeviceLogs, Keys: Keys{Device: t[2]}, Reader: t[3], Request: t[4]}
	default:
		return bad("unknown root " + t[1])
	}
	return ref, nil
}

// StreamOf returns the stream that stores a subject or a subject filter
// (wildcards allowed) of a Fleet family. Report filters that span both report
// streams (fleet.report.<device>.>) have no single stream and return an
// error.
func StreamOf(subject string) (string, error) {
	t := strings.Split(subject, ".")
	if len(t) < 2 || t[0] != "fleet" {
		return "", fmt.Errorf("%w %q: not a fleet subject", ErrInvalidSubject, subject)
	}
	switch t[1] {
	case "intent":
		return StreamIntent, nil
	case "rollout":
		return StreamRollout, nil
	case "command":
		return StreamCommands, nil
	case "dashboard":
		return StreamAudit, nil
	case "index":
		return StreamIndex, nil
	case "report":
		if len(t) == 4 {
			switch ReportKind(t[3]) {
			case ReportHeartbeat:
				return StreamLiveness, nil
			case ReportInventory, ReportContainers:
				return StreamTelemetry, nil
			case ReportWorkload, ReportTask, ReportCommand, ReportHealth, ReportFetch:
				return StreamReports, nil
			}
		}
		return "", fmt.Errorf("%w %q: a report filter must end in one report kind (heartbeats live in %s, inventory and containers in %s, the rest in %s)",
			ErrInvalidSubject, subject, StreamLiveness, StreamTelemetry, StreamReports)
	case ">":
		return "", fmt.Errorf("%w %q: spans every stream; name a family", ErrInvalidSubject, subject)
	}
	return "", fmt.Errorf("%w %q: unknown root %s", ErrInvalidSubject, subject, t[1])
}

// ParseIntentKVSubject returns the device of a fleet-intent KV subject
// ($KV.fleet-intent.<device>), validating the token.
func ParseIntentKVSubject(subject string) (string, error) {
	prefix := "$KV." + BucketIntent + "."
	device, ok := strings.CutPrefix(subject, prefix)
	if !ok {
		return "", fmt.Errorf("%w %q: a fleet-intent KV subject starts with %s", ErrInvalidSubject, subject, prefix)
	}
	if err := ValidateToken(TokenDevice, device); err != nil {
		return "", err
	}
	return device, nil
}

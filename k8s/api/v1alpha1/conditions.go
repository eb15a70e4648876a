package v1alpha1

// Condition types.
const (
	// ConditionTargetsResolved says whether the targets of the current
	// revision could be resolved, and why there are none when there are none.
	ConditionTargetsResolved = "TargetsResolved"
	// ConditionReady is true when the current revision succeeded.
	ConditionReady = "Ready"
	// ConditionProgressing says whether the current revision's rollout is
	// moving: True while it makes progress, Unknown while it is paused or
	// awaits an approval, False once it stopped: it succeeded, failed, has
	// no targets, or made no progress within its progress deadline
	// (ProgressDeadlineExceeded). Unlike Kubernetes' Deployment, it is
	// False after a success too, so that one `kubectl wait
	// --for=condition=Progressing=False` returns at every end (docs/rollouts.md).
	ConditionProgressing = "Progressing"
	// ConditionDegraded is True while at least one device reports the
	// Deployment's revision it runs degraded after it converged (a crash
	// loop, an OOM kill, a service down or unhealthy; ADR 0019), False
	// otherwise. It never changes Ready or the phase.
	ConditionDegraded = "Degraded"
	// ConditionFollowers is set on a Deployment whose targets follow its
	// selector (spec.rollout.targets Follow, ADR 0026): True, reason
	// FollowingSelector, the message says how many targets joined after
	// the revision was frozen and how many left. Absent for Frozen.
	ConditionFollowers = "Followers"
	// ConditionOnline is true while the device heartbeats.
	ConditionOnline = "Online"
	// ConditionPullSecretPolicy says whether the Deployment's pull-secret
	// paths are in its OpenBao policy, bound to its device groups' roles.
	ConditionPullSecretPolicy = "PullSecretPolicy"
	// ConditionIdentityRegistered says whether the Device's identity subject
	// is registered to it in the fleet-identity KV.
	ConditionIdentityRegistered = "IdentityRegistered"
	// ConditionLabelsOverridden is present while a Device has label pins
	// (spec.labels, spec.removedLabels): True when a pin differs from what
	// the device reports; its message lists every pin against the report.
	ConditionLabelsOverridden = "LabelsOverridden"
	// ConditionReportTrimmed is on a Device (status True) while the
	// device's last inventory went beyond the bounds of what a device may
	// put on its Device: its message says what was dropped or cut. It is
	// removed once a report is within bounds.
	ConditionReportTrimmed = "ReportTrimmed"
)

// Reasons of the Deployment conditions.
const (
	// ReasonResolved: targets resolved.
	ReasonResolved = "Resolved"
	// ReasonNoGroupSource: allowedGroups is set but the operator has no
	// group source, so the Deployment matches no device (fail closed).
	ReasonNoGroupSource = "NoGroupSource"
	// ReasonNoMatchingDevices: the selector matches no eligible device.
	ReasonNoMatchingDevices = "NoMatchingDevices"
	// ReasonRolloutSucceeded: every frozen target converged.
	ReasonRolloutSucceeded = "RolloutSucceeded"
	// ReasonRolloutInProgress: targets are still converging.
	ReasonRolloutInProgress = "RolloutInProgress"
	// ReasonRolloutProgressing (Progressing True): the rollout made
	// progress within its progress deadline (a transition, a target's
	// first report or first result).
	ReasonRolloutProgressing = "RolloutProgressing"
	// ReasonRolloutPaused (Progressing Unknown): the rollout is paused; its
	// progress deadline does not run.
	ReasonRolloutPaused = "RolloutPaused"
	// ReasonAwaitingApproval (Progressing Unknown): the next batch waits
	// for an approval; the progress deadline does not run.
	ReasonAwaitingApproval = "AwaitingApproval"
	// ReasonProgressDeadlineExceeded (Progressing False): no transition and
	// no target's first report or first result for the progress deadline
	// while targets wait; the message names up to five waiting targets and
	// their last report. It decides nothing: the rollout goes on, and a
	// target still ends in the target timeout's removal.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonServicesDegraded (Degraded True): devices report services
	// that crash-loop, were OOM-killed, stay down or are unhealthy; the
	// message names up to five of them.
	ReasonServicesDegraded = "ServicesDegraded"
	// ReasonNoDegradedDevices (Degraded False): no device reports the
	// Deployment degraded.
	ReasonNoDegradedDevices = "NoDegradedDevices"
	// ReasonFollowingSelector: the Followers condition of a Follow
	// Deployment.
	ReasonFollowingSelector = "FollowingSelector"
	// ReasonCanaryFailed: a canary failed; release is blocked.
	ReasonCanaryFailed = "CanaryFailed"
	// ReasonRolloutFailed: a target failed.
	ReasonRolloutFailed = "RolloutFailed"
	// ReasonRolledBack: the rollout failed and its devices were handed the
	// last revision whose rollout succeeded (rollout.onFailure: Rollback).
	ReasonRolledBack = "RolledBack"
	// ReasonNoTargets: the revision has no frozen target, so nothing can
	// converge: its phase is Failed, never Succeeded. TargetsResolved says
	// why; a new generation resolves the targets again.
	ReasonNoTargets = "NoTargets"
	// ReasonPolicySynced: the OpenBao policy names exactly the referenced
	// pull secrets and every group role carries it.
	ReasonPolicySynced = "PolicySynced"
	// ReasonNoPullSecrets: the score references no pull secret; the
	// Deployment has no OpenBao policy.
	ReasonNoPullSecrets = "NoPullSecrets"
	// ReasonOpenBaoDisabled: the operator has no OpenBao admin token, so
	// pull-secret paths are not added to OpenBao policies.
	ReasonOpenBaoDisabled = "OpenBaoDisabled"
	// ReasonOpenBaoRoleMissing: a device group's JWT role does not exist in
	// OpenBao.
	ReasonOpenBaoRoleMissing = "OpenBaoRoleMissing"
	// ReasonPolicySyncFailed: OpenBao refused or could not be reached.
	ReasonPolicySyncFailed = "PolicySyncFailed"
)

// Reasons of the Online and IdentityRegistered conditions of a Device.
const (
	// ReasonRegistered: the fleet-identity key of spec.identitySubject names
	// this device.
	ReasonRegistered = "Registered"
	// ReasonIdentityInUse: spec.identitySubject is registered to another
	// device; this Device's identity is not registered until it is fixed.
	ReasonIdentityInUse = "IdentityInUse"
	// ReasonHeartbeating: heartbeats arrive within the operator's
	// stale-after duration.
	ReasonHeartbeating = "Heartbeating"
	// ReasonConnected: the device has a connection up to a NATS server,
	// which checks it with PING/PONG (ADR 0032).
	ReasonConnected = "Connected"
	// ReasonDisconnected: the device has had no connection and no
	// heartbeat for the operator's stale-after duration (ADR 0032).
	ReasonDisconnected = "Disconnected"
	// ReasonHeartbeatMissed: no heartbeat for the operator's stale-after
	// duration.
	ReasonHeartbeatMissed = "HeartbeatMissed"
	// ReasonNoHeartbeat: no heartbeat was ever received.
	ReasonNoHeartbeat = "NoHeartbeat"
	// ReasonReportOverBounds: the device's last inventory had more labels,
	// or longer strings, than a Device keeps (ConditionReportTrimmed).
	ReasonReportOverBounds = "ReportOverBounds"
	// ReasonDuplicateDeviceID: an older Device in another namespace has the
	// same name (device id); this one is not served until renamed.
	ReasonDuplicateDeviceID = "DuplicateDeviceID"
)

// Reasons of the LabelsOverridden condition of a Device.
const (
	// ReasonLabelsPinned: at least one pinned label differs from the
	// device's report (another value, or a removal of a reported key).
	ReasonLabelsPinned = "LabelsPinned"
	// ReasonPinsMatchReports: every pinned label is what the device
	// reports; the pins take effect if the reports change.
	ReasonPinsMatchReports = "PinsMatchReports"
)

// FinalizerDeployment lets the operator append the removal intent before a
// Deployment disappears.
const FinalizerDeployment = "fleet.nationtech.io/removal-intent"

// Reasons of the TaskRun Ready condition (TargetsResolved uses the
// Deployment's reasons).
const (
	// ReasonTaskSucceeded: every frozen target succeeded.
	ReasonTaskSucceeded = "TaskSucceeded"
	// ReasonTaskInProgress: targets have not all finished.
	ReasonTaskInProgress = "TaskInProgress"
	// ReasonTaskFailed: every target finished and at least one failed.
	ReasonTaskFailed = "TaskFailed"
)

// FinalizerTaskRun lets the operator append taskrun.deleted, which takes
// the task out of its targets' intent, before a TaskRun disappears.
const FinalizerTaskRun = "fleet.nationtech.io/taskrun-removal-intent"

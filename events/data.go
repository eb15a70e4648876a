package events

import (
	"encoding/json"
	"time"
)

// Data is implemented by every event data struct: it ties the struct to its
// type constant at compile time.
type Data interface {
	EventType() Type
}

// Intent data.

// DeploymentRevisionCreated is the data of TypeDeploymentRevisionCreated. The
// revision is identified by (UID, Generation); RevisionID is a short stable
// name for it. Targets and Canaries are frozen: devices matched later are not
// part of this revision. Score carries secret references, never values.
type DeploymentRevisionCreated struct {
	UID         string          `json:"uid"`
	Generation  int64           `json:"generation"`
	RevisionID  string          `json:"revisionId"`
	ScoreDigest string          `json:"scoreDigest"`
	Score       json.RawMessage `json:"score"`
	Targets     []string        `json:"targets"`
	Canaries    []string        `json:"canaries"`
	// TargetChunks is the number of TypeDeploymentRevisionTargets events that
	// carry the rest of the target list when it did not fit; 0 when Targets
	// is complete. TargetsDigest covers the complete, sorted list.
	TargetChunks  int    `json:"targetChunks,omitempty"`
	TargetsDigest string `json:"targetsDigest,omitempty"`
	// Plan is the frozen rollout plan (ADR 0016); nil for the spec's
	// rollout (canaries, then every target at once).
	Plan *RolloutPlan `json:"plan,omitempty"`
	// TargetBatches has one entry per Targets entry, in the same order,
	// when Plan is set: 0 for a canary, k (1-based) for Plan.Batches[k-1].
	TargetBatches []int `json:"targetBatches,omitempty"`
	// TargetGroups has one entry per Targets entry, in the same order, when
	// Plan.Budget is set: the index of the target's group in
	// Plan.Budget.Values.
	TargetGroups []int `json:"targetGroups,omitempty"`
	// ProgressDeadlineSeconds is the Deployment's progress deadline
	// (spec.rollout.progressDeadline), when it sets one; 0: the operator's
	// (--progress-deadline). It only says when the rollout's Progressing
	// condition turns False: no decision depends on it.
	ProgressDeadlineSeconds int64 `json:"progressDeadlineSeconds,omitempty"`
	// MinReadySeconds is the Deployment's stability period
	// (spec.rollout.minReady), when it sets one: a device counts as
	// Converged only after every service ran that long, and a death
	// within it fails the device (ADR 0019). 0: Converged as soon as the
	// revision applied.
	MinReadySeconds int64 `json:"minReadySeconds,omitempty"`
	// Signatures is the Deployment's image trust policy
	// (spec.signatures), frozen with the revision (ADR 0023): a device
	// creates no container of the revision unless every image it pulled
	// is signed by one of its keys. Nil when the Deployment sets none: the
	// revision's bytes are as before.
	Signatures *SignaturePolicy `json:"signatures,omitempty"`
	// Follow is set when the Deployment's spec.rollout.targets is Follow
	// (ADR 0026): devices that come to match after the revision was frozen
	// join it (rollout.target-added), devices that stop matching leave it
	// and lose it. Absent (Frozen, the default): the bytes of before.
	Follow bool `json:"follow,omitempty"`
	// Prefetch is the Deployment's spec.rollout.prefetch (ADR 0027): every
	// frozen target may fetch the revision's images as soon as the
	// revision exists, before the rollout hands it the revision. False
	// when the Deployment does not set it: the revision's bytes are as
	// before.
	Prefetch bool `json:"prefetch,omitempty"`
	// Window is the Deployment's spec.rollout.maintenanceWindow (ADR
	// 0029): a target switches to the revision only inside this daily
	// window of its local time. FetchWindow is spec.rollout.fetchWindow:
	// with Prefetch, a target fetches the images ahead only inside it.
	// Nil when the Deployment sets none: the revision's bytes are as
	// before.
	Window      *MaintenanceWindow `json:"window,omitempty"`
	FetchWindow *MaintenanceWindow `json:"fetchWindow,omitempty"`
}

// RolloutPlan is a revision's frozen rollout plan: the batches after the
// canary stage, resolved against the frozen targets, and the controls.
type RolloutPlan struct {
	// Batches in order; every non-canary target is in exactly one (the
	// operator adds a last batch for targets no batch of the spec took).
	Batches []PlanBatch `json:"batches"`
	// Approval is ApprovalManual to hold before each batch; empty: start
	// each batch as soon as the previous one succeeded.
	Approval string `json:"approval,omitempty"`
	// OnFailure is what a failed batch does: empty or OnFailureFail fails
	// the rollout, OnFailurePause pauses it, OnFailureRollback rolls back.
	OnFailure string `json:"onFailure,omitempty"`
	// Budget, when set, limits how many targets sharing a label value are
	// between revisions at once.
	Budget *DisruptionBudget `json:"budget,omitempty"`
	// EmptySelectors are, in a Follow revision only (ADR 0026), the spec's
	// selector batches that resolved to no device and were dropped: a
	// follower whose labels match one joins the batch that took its place.
	// Absent otherwise: the revision's bytes are as before.
	EmptySelectors []EmptySelectorBatch `json:"emptySelectors,omitempty"`
}

// EmptySelectorBatch is a selector batch of the spec that resolved to no
// device when a Follow revision was frozen.
type EmptySelectorBatch struct {
	// Before is the plan batch (1-based) that took its place: the first
	// batch the plan kept after it in the spec's order (the leftovers when
	// no spec batch after it kept a device); len(Batches)+1 when no batch
	// comes after it, and a follower joins the last batch.
	Before int `json:"before"`
	// Selector is the batch's spec selector (matchLabels).
	Selector map[string]string `json:"selector"`
}

// DisruptionBudget is a plan's frozen disruption budget: of the targets
// sharing a value of LabelKey (a group), at most MaxUnavailable, or
// MaxPercent % of the group rounded down, are handed the revision and not
// yet Converged or Failed at any time; at least one per group, so every
// group makes progress. Exactly one of MaxUnavailable and MaxPercent is
// set.
type DisruptionBudget struct {
	LabelKey       string `json:"labelKey"`
	MaxUnavailable int    `json:"maxUnavailable,omitempty"`
	MaxPercent     int    `json:"maxPercent,omitempty"`
	// Values are the label values of the groups, sorted; the revision's
	// TargetGroups index them. Targets without the label form one more
	// group, index len(Values).
	Values []string `json:"values"`
}

// PlanBatch is one frozen batch of a RolloutPlan.
type PlanBatch struct {
	// Size is how many targets the batch has.
	Size int `json:"size"`
	// SuccessPercent (1..100) of the batch's targets must converge.
	SuccessPercent int `json:"successPercent"`
	// SoakSeconds the threshold must hold before the batch succeeds.
	SoakSeconds int64 `json:"soakSeconds,omitempty"`
	// Selector is the batch's spec selector (matchLabels), frozen only in
	// a Follow revision (ADR 0026): a follower joins the first batch
	// whose selector its labels match. Absent in a Frozen revision, whose
	// bytes are as before.
	Selector map[string]string `json:"selector,omitempty"`
}

// Rollout plan controls.
const (
	// ApprovalManual holds the rollout before each batch until approved.
	ApprovalManual = "Manual"
	// OnFailureFail fails the rollout when a batch fails (the default).
	OnFailureFail = "Fail"
	// OnFailurePause pauses the rollout when a batch fails.
	OnFailurePause = "Pause"
	// OnFailureRollback hands the devices that received the revision the
	// last revision whose rollout succeeded when a batch or the canary
	// stage fails.
	OnFailureRollback = "Rollback"
)

// EventType implements Data.
func (DeploymentRevisionCreated) EventType() Type { return TypeDeploymentRevisionCreated }

// DeploymentRevisionTargets is the data of TypeDeploymentRevisionTargets.
type DeploymentRevisionTargets struct {
	UID        string   `json:"uid"`
	Generation int64    `json:"generation"`
	Chunk      int      `json:"chunk"`
	Targets    []string `json:"targets"`
	Canaries   []string `json:"canaries,omitempty"`
	// TargetBatches and TargetGroups are the entries of the revision's
	// TargetBatches and TargetGroups for this chunk's Targets, in the same
	// order (ADR 0016).
	TargetBatches []int `json:"targetBatches,omitempty"`
	TargetGroups  []int `json:"targetGroups,omitempty"`
}

// EventType implements Data.
func (DeploymentRevisionTargets) EventType() Type { return TypeDeploymentRevisionTargets }

// DeploymentDeleted is the data of TypeDeploymentDeleted.
type DeploymentDeleted struct {
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
}

// EventType implements Data.
func (DeploymentDeleted) EventType() Type { return TypeDeploymentDeleted }

// TaskRunCreated is the data of TypeTaskRunCreated.
type TaskRunCreated struct {
	UID        string   `json:"uid"`
	Generation int64    `json:"generation"`
	Task       string   `json:"task"`
	Targets    []string `json:"targets"`
	// Agent is the executable of an agent-upgrade (nil otherwise).
	Agent *AgentArtifact `json:"agent,omitempty"`
	// Window is the TaskRun's maintenance window (nil: none).
	Window *MaintenanceWindow `json:"window,omitempty"`
	// TargetChunks, when positive, is the number of TypeTaskRunTargets
	// events just before this one on its subject that carry the targets
	// (Targets is then empty); TargetsDigest is the complete list's
	// (TargetsDigest). Both absent when Targets is complete (ADR 0010).
	TargetChunks  int    `json:"targetChunks,omitempty"`
	TargetsDigest string `json:"targetsDigest,omitempty"`
}

// EventType implements Data.
func (TaskRunCreated) EventType() Type { return TypeTaskRunCreated }

// TaskRunTargets is the data of TypeTaskRunTargets: one chunk of a
// TaskRun's frozen target list, in order.
type TaskRunTargets struct {
	UID        string   `json:"uid"`
	Generation int64    `json:"generation"`
	Chunk      int      `json:"chunk"`
	Targets    []string `json:"targets"`
}

// EventType implements Data.
func (TaskRunTargets) EventType() Type { return TypeTaskRunTargets }

// TaskRunDeleted is the data of TypeTaskRunDeleted.
type TaskRunDeleted struct {
	UID string `json:"uid"`
}

// EventType implements Data.
func (TaskRunDeleted) EventType() Type { return TypeTaskRunDeleted }

// Rollout data. Every transition carries the counts at the moment it was
// decided.

// RolloutCounts are the per-revision target counts.
type RolloutCounts struct {
	Total     int `json:"total"`
	Succeeded int `json:"succeeded"`
	Pending   int `json:"pending"`
	Failed    int `json:"failed"`
	Canaries  int `json:"canaries"`
	// CanariesSucceeded and CanariesFailed count canaries only.
	CanariesSucceeded int `json:"canariesSucceeded"`
	CanariesFailed    int `json:"canariesFailed"`
	// Followers is how many of Total joined after the revision was frozen
	// (a Follow Deployment, ADR 0026); absent otherwise.
	Followers int `json:"followers,omitempty"`
}

// RolloutTransition is the data of every rollout transition type.
type RolloutTransition struct {
	UID        string        `json:"uid"`
	Generation int64         `json:"generation"`
	RevisionID string        `json:"revisionId"`
	Counts     RolloutCounts `json:"counts"`
	// Device and Error name the failure for canary-failed and failed.
	Device string `json:"device,omitempty"`
	Error  string `json:"error,omitempty"`
	// Released lists the devices a release transition hands the revision to
	// (canary stage: the canaries; released: the remaining targets, left
	// out when they would not fit in one event: rollout.released hands the
	// revision to every frozen target).
	Released []string `json:"released,omitempty"`
	// Batch is the plan batch (1-based) a batch transition, an approval or
	// awaiting-approval is about.
	Batch int `json:"batch,omitempty"`
	// By is who asked for an approval, a pause or a resume (the API
	// server's name of the user); Request is the request's id.
	By      string `json:"by,omitempty"`
	Request string `json:"request,omitempty"`
	// RollbackTo is the generation rollout.rolled-back hands back: the last
	// of the same Deployment UID whose rollout succeeded.
	RollbackTo int64 `json:"rollbackTo,omitempty"`
	// Follow marks a membership change of a Follow Deployment (ADR 0026):
	// on rollout.target-added always; on rollout.target-removed it says the
	// device left the Deployment, so its fleet-intent entry is taken back
	// (a removal without it only takes a target out of the accounting).
	Follow bool `json:"follow,omitempty"`
	// Reason is why a device joined (rollout.target-added): "Device
	// created", "labels changed", "quarantine lifted", …; a follow
	// removal says why in Error, like every removal.
	Reason string `json:"reason,omitempty"`
	// Change is the label or membership change that caused a follow
	// transition, e.g. "role=analyzer (was role=other)".
	Change string `json:"change,omitempty"`
	// HandedGeneration and HandedRevisionID are, on a rollout.target-added
	// of a revision whose rollout failed, the revision the device is
	// handed instead (ADR 0026): the Deployment's last whose rollout
	// succeeded (the revision's LastSucceeded). Absent otherwise.
	HandedGeneration int64  `json:"handedGeneration,omitempty"`
	HandedRevisionID string `json:"handedRevisionId,omitempty"`
	// BudgetGroup is, on a rollout.target-added of a revision whose plan
	// has a disruption budget, the follower's value of the budget's label
	// key (empty: it has none), the group the writer chose; Batch is then
	// the plan batch it joins (ADR 0026).
	BudgetGroup string `json:"budgetGroup,omitempty"`

	typ Type
}

// NewRolloutTransition returns transition data for one of the rollout types.
func NewRolloutTransition(t Type, d RolloutTransition) RolloutTransition {
	d.typ = t
	return d
}

// EventType implements Data. The zero value has no type; build transitions
// with NewRolloutTransition.
func (d RolloutTransition) EventType() Type { return d.typ }

// Report data.

// DeviceHeartbeat is the data of TypeDeviceHeartbeat.
type DeviceHeartbeat struct {
	AgentVersion string `json:"agentVersion"`
	// Uptime of the agent process.
	Uptime time.Duration `json:"uptimeNs"`
}

// EventType implements Data.
func (DeviceHeartbeat) EventType() Type { return TypeDeviceHeartbeat }

// DeviceInventory is the data of TypeDeviceInventory. Labels are
// self-reported placement data, never authorization data.
type DeviceInventory struct {
	OS           string            `json:"os"`
	Arch         string            `json:"arch"`
	Kernel       string            `json:"kernel"`
	AgentVersion string            `json:"agentVersion"`
	Labels       map[string]string `json:"labels,omitempty"`
	// TimeZone is the IANA name of the device's local time zone
	// ("Europe/Paris"), in which it reads maintenance windows (ADR 0029);
	// empty when the agent cannot name it (an agent older than it never
	// sends it). Hostile like every report field: read it with
	// LoadTimeZone.
	TimeZone string `json:"timeZone,omitempty"`
}

// EventType implements Data.
func (DeviceInventory) EventType() Type { return TypeDeviceInventory }

// WorkloadPhase is the state of one Deployment revision on one device.
type WorkloadPhase string

// Workload phases.
const (
	WorkloadPending   WorkloadPhase = "Pending"
	WorkloadApplying  WorkloadPhase = "Applying"
	WorkloadConverged WorkloadPhase = "Converged"
	WorkloadFailed    WorkloadPhase = "Failed"
	WorkloadRemoved   WorkloadPhase = "Removed"
)

// WorkloadStatus is the data of TypeWorkloadStatus: one Deployment revision
// on the reporting device.
type WorkloadStatus struct {
	Namespace  string        `json:"namespace"`
	Deployment string        `json:"deployment"`
	UID        string        `json:"uid"`
	Generation int64         `json:"generation"`
	RevisionID string        `json:"revisionId"`
	Phase      WorkloadPhase `json:"phase"`
	Error      string        `json:"error,omitempty"`
	Since      time.Time     `json:"since"`
	// WindowOpens, with Phase Pending, says the device waits for the
	// revision's maintenance window (ADR 0029): when it opens next, on
	// the device's clock like Since. The operator believes only the wait
	// (WindowOpens minus Since, more than 0 and at most 24 hours) and only
	// for a revision that has a window. Nil otherwise.
	WindowOpens *time.Time `json:"windowOpens,omitempty"`
}

// EventType implements Data.
func (WorkloadStatus) EventType() Type { return TypeWorkloadStatus }

// TaskStatus is the data of TypeTaskStatus.
type TaskStatus struct {
	Namespace string `json:"namespace"`
	TaskRun   string `json:"taskRun"`
	UID       string `json:"uid"`
	// Task is the task's name (TaskSystemUpgrade, TaskAgentUpgrade).
	Task string `json:"task,omitempty"`
	// Phase is TaskPending, TaskRunning, TaskSucceeded or TaskFailed.
	Phase string `json:"phase"`
	Error string `json:"error,omitempty"`
	// Output is the end of the operation's output, at most
	// MaxTaskOutput bytes (the beginning is cut when longer).
	Output string `json:"output,omitempty"`
	// Changes are the packages a system-upgrade changed.
	Changes []PackageChange `json:"changes,omitempty"`
	// AgentVersion is the version the agent reports after an
	// agent-upgrade (the new one, or the restored one).
	AgentVersion string    `json:"agentVersion,omitempty"`
	Since        time.Time `json:"since"`
}

// MaxTaskOutput bounds TaskStatus.Output.
const MaxTaskOutput = 16 << 10

// EventType implements Data.
func (TaskStatus) EventType() Type { return TypeTaskStatus }

// CommandResult is the data of TypeCommandResult.
type CommandResult struct {
	// CommandID is the id of the agent.command event answered.
	CommandID string `json:"commandId"`
	Command   string `json:"command"`
	OK        bool   `json:"ok"`
	Error     string `json:"error,omitempty"`
}

// EventType implements Data.
func (CommandResult) EventType() Type { return TypeCommandResult }

// AgentCommand is the data of TypeAgentCommand. Command is one of a fixed set
// the agent knows (for example "reconcile-now", "report-inventory"); the
// agent answers unknown commands with an error result.
type AgentCommand struct {
	Command string `json:"command"`
	// RequestedBy names who asked (user or component), for the audit trail.
	RequestedBy string `json:"requestedBy,omitempty"`
	// Logs are the options of CommandLogs and the ids of CommandLogsStop
	// (ADR 0025); absent for every other command.
	Logs *LogsRequest `json:"logs,omitempty"`
}

// EventType implements Data.
func (AgentCommand) EventType() Type { return TypeAgentCommand }

// Dashboard device actions (DashboardDeviceAction.Action).
const (
	// ActionQuarantine: the blacklist label was added to the Device.
	ActionQuarantine = "quarantine"
	// ActionRelease: the blacklist label was removed from the Device.
	ActionRelease = "release"
	// ActionCommand: an agent.command was appended for the device.
	ActionCommand = "command"
)

// DashboardDeviceAction is the data of TypeDashboardDeviceAction.
type DashboardDeviceAction struct {
	// Action is ActionQuarantine, ActionRelease or ActionCommand.
	Action string `json:"action"`
	// Namespace is the Device resource's namespace.
	Namespace string `json:"namespace"`
	// User is the signed-in user's display name; UserSubject the OIDC
	// subject (iss-scoped user id) of the id_token they signed in with.
	User        string `json:"user"`
	UserSubject string `json:"userSubject"`
	// Command and CommandID name the agent command and the id of its
	// agent.command event, for ActionCommand.
	Command   string `json:"command,omitempty"`
	CommandID string `json:"commandId,omitempty"`
}

// EventType implements Data.
func (DashboardDeviceAction) EventType() Type { return TypeDashboardDeviceAction }

// DashboardAlertAcknowledged is the data of TypeDashboardAlertAcknowledged.
type DashboardAlertAcknowledged struct {
	// Alert is the alert's id (its subject token is AlertKey(Alert)).
	Alert       string `json:"alert"`
	User        string `json:"user"`
	UserSubject string `json:"userSubject"`
}

// EventType implements Data.
func (DashboardAlertAcknowledged) EventType() Type { return TypeDashboardAlertAcknowledged }

// Workload health (ADR 0019): what a device runs after the switch. Readers
// never trust the bounds below: they clip every string and list before
// showing or keeping it (Clip).

// Health reasons (WorkloadHealth.Reason and WorkloadContainers.Degraded).
const (
	// HealthCrashLoop: a service died at least the agent's bound of times
	// (3 by default) within its counting window (5 minutes by default).
	HealthCrashLoop = "CrashLoop"
	// HealthOOMKilled: a service was killed for running out of memory.
	HealthOOMKilled = "OOMKilled"
	// HealthDown: a service is not running 30 s after it died.
	HealthDown = "Down"
	// HealthUnhealthy: a service's health check reports it unhealthy.
	HealthUnhealthy = "Unhealthy"
	// HealthStable: the reason of every recovered report: every service
	// ran without a death for the recovery window.
	HealthStable = "Stable"
)

// Container roles (ContainerState.Role).
const (
	// ContainerRoleInit is a Deployment's init container.
	ContainerRoleInit = "init"
	// ContainerRoleService is one of a Deployment's services.
	ContainerRoleService = "service"
)

// Bounds of the health and containers reports. The agent keeps within them;
// readers clip to them (WorkloadHealth.Clip, DeviceContainers.Clip).
const (
	// MaxHealthServices bounds WorkloadHealth.Services.
	MaxHealthServices = 8
	// MaxHealthLogLines bounds ServiceHealth.Logs.
	MaxHealthLogLines = 10
	// MaxHealthLogLineRunes bounds each line of ServiceHealth.Logs.
	MaxHealthLogLineRunes = 200
	// MaxHealthServiceLogBytes bounds the bytes of one service's Logs.
	MaxHealthServiceLogBytes = 2 << 10
	// MaxContainerWorkloads bounds DeviceContainers.Workloads.
	MaxContainerWorkloads = 64
	// MaxWorkloadContainers bounds WorkloadContainers.Containers.
	MaxWorkloadContainers = 16
	// MaxHealthText bounds every other string of the health and
	// containers reports (names, states, digests, reasons).
	MaxHealthText = 256
)

// WorkloadHealth is the data of TypeWorkloadDegraded and
// TypeWorkloadRecovered: the health of one Deployment revision on the
// reporting device, after the device reported it Converged. Build it with
// NewWorkloadHealth; its events carry the revision's correlation (UID,
// Generation).
type WorkloadHealth struct {
	Namespace  string `json:"namespace"`
	Deployment string `json:"deployment"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	RevisionID string `json:"revisionId"`
	// Reason is HealthCrashLoop, HealthOOMKilled, HealthDown or
	// HealthUnhealthy for a degraded report, HealthStable for a recovered
	// one.
	Reason string `json:"reason"`
	// Window is, in seconds, the counting window of a degraded report, or
	// how long the revision ran stably before a recovered one.
	Window int `json:"windowSeconds"`
	// Services are, for a degraded report, the services at fault; for a
	// recovered one, those that were. At most MaxHealthServices.
	Services []ServiceHealth `json:"services"`
	// Since is the device's clock at the transition: informative only.
	Since time.Time `json:"since"`

	typ Type
}

// NewWorkloadHealth returns health data of type t (TypeWorkloadDegraded or
// TypeWorkloadRecovered).
func NewWorkloadHealth(t Type, d WorkloadHealth) WorkloadHealth {
	d.typ = t
	return d
}

// EventType implements Data. The zero value has no type; build health data
// with NewWorkloadHealth.
func (d WorkloadHealth) EventType() Type { return d.typ }

// ServiceHealth is one service of a WorkloadHealth report.
type ServiceHealth struct {
	Name string `json:"name"`
	// State is the container's state: running, exited, created or other.
	State string `json:"state"`
	// Restarts are the deaths the agent saw within the window.
	Restarts int `json:"restarts"`
	// RestartsTotal is the engine's restart count of the container.
	RestartsTotal int `json:"restartsTotal,omitempty"`
	// ExitCode is the last exit code; Signal names the signal when it is
	// 128+n ("SIGKILL" for 137).
	ExitCode  int        `json:"exitCode"`
	Signal    string     `json:"signal,omitempty"`
	OOMKilled bool       `json:"oomKilled,omitempty"`
	ExitedAt  *time.Time `json:"exitedAt,omitempty"`
	// Health is the health check's verdict: starting, healthy or
	// unhealthy; empty without a check.
	Health string `json:"health,omitempty"`
	// Logs are the last lines the service printed, degraded reports only:
	// at most MaxHealthLogLines of at most MaxHealthLogLineRunes each,
	// control characters stripped and secrets redacted by the agent.
	Logs []string `json:"logs,omitempty"`
}

// DeviceContainers is the data of TypeDeviceContainers: the state of every
// container the agent owns on the device, whole, sent on change.
type DeviceContainers struct {
	// Workloads are sorted by namespace then Deployment; at most
	// MaxContainerWorkloads.
	Workloads []WorkloadContainers `json:"workloads"`
	// Truncated says the agent left workloads or containers out to keep
	// within the bounds.
	Truncated bool `json:"truncated,omitempty"`
}

// EventType implements Data.
func (DeviceContainers) EventType() Type { return TypeDeviceContainers }

// WorkloadContainers are the containers of one Deployment revision on the
// device.
type WorkloadContainers struct {
	Namespace  string `json:"namespace"`
	Deployment string `json:"deployment"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	RevisionID string `json:"revisionId"`
	// Degraded is the health reason while the revision is Degraded on the
	// device; empty otherwise.
	Degraded string `json:"degraded,omitempty"`
	// Containers are the init container first, then the services in the
	// score's order; at most MaxWorkloadContainers.
	Containers []ContainerState `json:"containers"`
}

// ContainerState is one container's state.
type ContainerState struct {
	Name string `json:"name"`
	// Role is ContainerRoleInit or ContainerRoleService.
	Role string `json:"role"`
	// State is running, exited, created or other.
	State string `json:"state"`
	// Restarts is the engine's restart count of the container.
	Restarts int `json:"restarts"`
	// ExitCode is the last exit code; Signal names the signal when it is
	// 128+n.
	ExitCode  int        `json:"exitCode"`
	Signal    string     `json:"signal,omitempty"`
	OOMKilled bool       `json:"oomKilled,omitempty"`
	StartedAt *time.Time `json:"startedAt,omitempty"`
	ExitedAt  *time.Time `json:"exitedAt,omitempty"`
	// Health is starting, healthy or unhealthy; empty without a check.
	Health string `json:"health,omitempty"`
	// ImageDigest is the image's digest (sha256:…), else its image ID.
	ImageDigest string `json:"imageDigest,omitempty"`
}

// Ways a device log was asked for (DeviceLogsRequested.Via).
const (
	ViaCLI       = "cli"
	ViaDashboard = "dashboard"
)

// DeviceLogsRequested is the data of TypeDeviceLogsRequested: who asked to
// read which container's log of a device, and whether it was allowed.
type DeviceLogsRequested struct {
	// Namespace is the Device's; Deployment and Service the container's.
	Namespace  string `json:"namespace"`
	Deployment string `json:"deployment"`
	Service    string `json:"service"`
	// User names who asked: the Kubernetes user of fleet logs, the
	// signed-in user of the dashboard; UserSubject the OIDC subject when
	// known.
	User        string `json:"user"`
	UserSubject string `json:"userSubject,omitempty"`
	// Via is ViaCLI or ViaDashboard.
	Via string `json:"via"`
	// Request is the logs request id (the answer subject's last token).
	Request string `json:"request"`
	// Tail, Since and Follow are the options asked.
	Tail   int       `json:"tail,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	Follow bool      `json:"follow,omitempty"`
	// Diagnose is set for a diagnosis (fleet describe device; Deployment
	// and Service empty), absent for a log.
	Diagnose bool `json:"diagnose,omitempty"`
	// Allowed is false when the reader was refused; Reason says why.
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason,omitempty"`
	// RefusedBy is RefusedByDevice in the second record of a request the
	// reader was allowed and the device then refused (Allowed false,
	// Reason the device's words, made printable and cut); absent
	// otherwise.
	RefusedBy string `json:"refusedBy,omitempty"`
}

// RefusedByDevice is DeviceLogsRequested.RefusedBy of a request the
// device refused: it does not run the Deployment or service asked, or
// answers as many requests as it may.
const RefusedByDevice = "device"

// EventType implements Data.
func (DeviceLogsRequested) EventType() Type { return TypeDeviceLogsRequested }

// Fetch phases a device reports in device.workload.fetch.
const (
	// FetchStarted: the device began fetching the revision's images.
	FetchStarted = "Started"
	// FetchDone: every image of the revision is on the device.
	FetchDone = "Fetched"
	// FetchFailed: a pull failed; the device tries again on its next
	// pass. It decides nothing: the switch pulls again.
	FetchFailed = "Failed"
)

// WorkloadFetch is the data of TypeWorkloadFetch: a device's progress in
// fetching a revision's images ahead of its release (ADR 0027). It is
// progress only: the rollout never folds it into a phase, and the operator
// counts a device's Fetched report only for a revision the device is a
// frozen target of.
type WorkloadFetch struct {
	Namespace  string `json:"namespace"`
	Deployment string `json:"deployment"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	RevisionID string `json:"revisionId"`
	// Phase is FetchStarted, FetchDone or FetchFailed.
	Phase string `json:"phase"`
	// Images is how many distinct images the revision has; Pulled how many
	// of them this fetch pulled (the others were already there).
	Images int `json:"images"`
	Pulled int `json:"pulled,omitempty"`
	// Started is when the fetch began (device clock); Ended when it
	// finished or failed (nil while Started).
	Started time.Time  `json:"started"`
	Ended   *time.Time `json:"ended,omitempty"`
	Error   string     `json:"error,omitempty"`
}

// EventType implements Data.
func (WorkloadFetch) EventType() Type { return TypeWorkloadFetch }

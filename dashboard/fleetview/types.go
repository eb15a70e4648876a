package fleetview

import (
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// Liveness is a device's liveness as the dashboard shows it.
type Liveness string

// Liveness values. The Device CR says Online, Stale or Unknown (no heartbeat
// ever); the dashboard splits Stale by Options.OfflineAfter.
const (
	// LivenessOnline: the Device CR says Online (a heartbeat within the
	// operator's stale-after, 90s by default).
	LivenessOnline Liveness = "online"
	// LivenessStale: the Device CR says Stale and its last heartbeat is
	// younger than Options.OfflineAfter.
	LivenessStale Liveness = "stale"
	// LivenessOffline: no heartbeat ever, or the last one is older than
	// Options.OfflineAfter.
	LivenessOffline Liveness = "offline"
)

// Overview is the fleet overview page.
type Overview struct {
	// At is when the figures were computed.
	At time.Time `json:"at"`
	// Devices counts devices by liveness.
	Devices LivenessCounts `json:"devices"`
	// Quarantined counts devices carrying the blacklist label.
	Quarantined int `json:"quarantined"`
	// Deployments counts Deployments by status.phase, every phase listed
	// (Pending, Canary, Progressing, Succeeded, Failed, then "" for
	// Deployments the operator has not given a phase yet).
	Deployments []PhaseCount `json:"deployments"`
	// TaskRuns counts TaskRuns by status.phase, every phase listed.
	TaskRuns []PhaseCount `json:"taskRuns"`
	// Alerts counts the open alerts (before acknowledgement, which the HTTP
	// layer holds) by severity.
	Alerts AlertCounts `json:"alerts"`
}

// LivenessCounts counts devices by liveness.
type LivenessCounts struct {
	Total   int `json:"total"`
	Online  int `json:"online"`
	Stale   int `json:"stale"`
	Offline int `json:"offline"`
}

// PhaseCount is the number of objects in one phase.
type PhaseCount struct {
	Phase string `json:"phase"`
	Count int    `json:"count"`
}

// AlertCounts counts alerts by severity.
type AlertCounts struct {
	Total    int `json:"total"`
	Critical int `json:"critical"`
	Warning  int `json:"warning"`
}

// DeviceQuery selects a page of the device list. The zero value is the
// first page of every device.
type DeviceQuery struct {
	// Selector is a Kubernetes label selector ("site=paris,canary!=true",
	// "tier in (edge,core)") over the Device's metadata.labels. Empty: every
	// device.
	Selector string
	// Liveness keeps only devices of this liveness; empty: any.
	Liveness Liveness
	// Search keeps devices whose id, namespace, a label key or value, or an
	// inventory field contains it (case-insensitive). At most MaxSearch
	// bytes.
	Search string
	// Offset is the index of the first device of the page (0-based).
	Offset int
	// Limit is the page size; 0: DefaultPageSize; at most MaxPageSize.
	Limit int
}

// Paging bounds.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
	MaxSearch       = 256
)

// DevicePage is one page of the device list.
type DevicePage struct {
	Items []DeviceRow `json:"items"`
	// Matched is how many devices match the query (all pages); Total is
	// how many devices the fleet has.
	Matched int `json:"matched"`
	Total   int `json:"total"`
	// Offset and Limit are the page's, after defaults.
	Offset int `json:"offset"`
	Limit  int `json:"limit"`
}

// DeviceRow is one device in the list, and the head of its page.
type DeviceRow struct {
	// ID is the device id (the Device's name); Namespace the Device's.
	ID        string   `json:"id"`
	Namespace string   `json:"namespace"`
	Liveness  Liveness `json:"liveness"`
	// LastHeartbeat is status.lastHeartbeat (zero: never): the heartbeat
	// the operator decided the current liveness on. For an online device
	// that is the heartbeat that brought it online (its liveness-since), for
	// a stale one when it was last heard from. The device page has the
	// latest heartbeat in Heartbeats.
	LastHeartbeat time.Time `json:"lastHeartbeat,omitzero"`
	// Labels are metadata.labels (reported labels mirrored by the operator
	// included), bounded (see MaxLabels).
	Labels []Label `json:"labels"`
	// LabelsTruncated is true when the Device has more labels than shown.
	LabelsTruncated bool `json:"labelsTruncated,omitempty"`
	// Inventory is status.inventory; empty fields when never reported.
	Inventory Inventory `json:"inventory"`
	// Quarantined is true when the Device carries the blacklist label.
	Quarantined bool `json:"quarantined,omitempty"`
	// Runs is what the device runs: the Deployments of status.workloads
	// (the device's own container reports, mirrored by the operator:
	// device data, cleaned), at most MaxRunsShown; RunsMore counts the
	// others.
	Runs     []Running `json:"runs,omitempty"`
	RunsMore int       `json:"runsMore,omitempty"`
}

// MaxRunsShown bounds DeviceRow.Runs.
const MaxRunsShown = 4

// Running is one Deployment a device runs.
type Running struct {
	Namespace  string `json:"namespace"`
	Deployment string `json:"deployment"`
	// Revision is the revision id the device reports.
	Revision string `json:"revision,omitempty"`
	// Degraded is the reason the device reports it degraded; "" while
	// it is not.
	Degraded string `json:"degraded,omitempty"`
}

// Label is one label, sorted by key in a list.
type Label struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

// Bounds on device-reported data shown on a page: longer strings are cut
// (marked with "…"), bytes that are not UTF-8 replaced.
const (
	MaxLabels      = 64
	MaxFieldLength = 256
	MaxErrorLength = 1024
)

// Inventory is what the device reported of itself.
type Inventory struct {
	OS           string `json:"os,omitempty"`
	Arch         string `json:"arch,omitempty"`
	Kernel       string `json:"kernel,omitempty"`
	AgentVersion string `json:"agentVersion,omitempty"`
}

// DeviceDetail is a device's page.
type DeviceDetail struct {
	DeviceRow
	// Conditions are the Device's status conditions (Online,
	// IdentityRegistered).
	Conditions []Condition `json:"conditions"`
	// Deployments are the Deployments the device runs or should run,
	// sorted by namespace and name.
	Deployments []DeviceDeployment `json:"deployments"`
	// Tasks are the task entries of the device's desired state.
	Tasks []DeviceTask `json:"tasks,omitempty"`
	// Heartbeats summarises the heartbeats the telemetry stream still
	// holds for the device (the last few).
	Heartbeats Heartbeats `json:"heartbeats"`
	// Timeline is the device's recent events, newest first, at most
	// MaxTimeline.
	Timeline []TimelineEntry `json:"timeline"`
	// TimelineError says why the timeline could not be read (the streams
	// unreachable); the rest of the page is from the cache.
	TimelineError string `json:"timelineError,omitempty"`
	// Workloads are the device's containers per Deployment as its last
	// device.containers snapshot has them (the telemetry stream keeps the
	// last few), sorted by namespace and name, at most MaxWorkloadsShown.
	// Empty when the device never sent one (an older agent, or
	// --report-containers=false).
	Workloads []DeviceWorkload `json:"workloads"`
	// WorkloadsAt is when the stream stored that snapshot (zero: none).
	WorkloadsAt time.Time `json:"workloadsAt,omitzero"`
	// WorkloadsTruncated is true when the device cut its snapshot (its
	// bound) or the page shows fewer Deployments or containers than it has.
	WorkloadsTruncated bool `json:"workloadsTruncated,omitempty"`
}

// Bounds of the containers table of a device page (the agent's own bounds:
// what a device sends past them is cut here).
const (
	MaxWorkloadsShown  = 64
	MaxContainersShown = 16
)

// DeviceWorkload is one Deployment's containers on a device: every string
// is the device's and is cleaned.
type DeviceWorkload struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	RevisionID string `json:"revisionId"`
	// Degraded is the reason the device reports the Deployment Degraded
	// (CrashLoop, OOMKilled, Down, Unhealthy); empty when it is not.
	Degraded string `json:"degraded,omitempty"`
	// Containers: init containers first, then the services in score
	// order, at most MaxContainersShown.
	Containers []Container `json:"containers"`
}

// Container is one container's state as the device reported it.
type Container struct {
	Name string `json:"name"`
	// Role is init or service.
	Role string `json:"role"`
	// State is running, exited, created or other.
	State string `json:"state"`
	// Restarts is the engine's restart count.
	Restarts int `json:"restarts"`
	// ExitCode, Signal and OOMKilled are the last exit.
	ExitCode  int    `json:"exitCode"`
	Signal    string `json:"signal,omitempty"`
	OOMKilled bool   `json:"oomKilled,omitempty"`
	// StartedAt and ExitedAt are the device's clock (zero: unknown).
	StartedAt time.Time `json:"startedAt,omitzero"`
	ExitedAt  time.Time `json:"exitedAt,omitzero"`
	// Health is starting, healthy or unhealthy (empty: no health check).
	Health string `json:"health,omitempty"`
	// ImageDigest is sha256:… (else the image ID).
	ImageDigest string `json:"imageDigest,omitempty"`
}

// Heartbeats summarises a device's heartbeats as the telemetry stream holds
// them: only the last few per device are kept.
type Heartbeats struct {
	// Last is the latest heartbeat's stored time (zero: none kept).
	Last time.Time `json:"last,omitzero"`
	// Kept is how many the stream holds; AgentVersions the versions they
	// name; Uptime the agent's uptime in the latest.
	Kept          int           `json:"kept"`
	AgentVersions []string      `json:"agentVersions"`
	Uptime        time.Duration `json:"uptimeNs,omitempty"`
}

// MaxTimeline bounds a timeline shown on a page.
const MaxTimeline = 100

// Condition is a status condition.
type Condition struct {
	Type    string    `json:"type"`
	Status  string    `json:"status"`
	Reason  string    `json:"reason"`
	Message string    `json:"message"`
	Since   time.Time `json:"since"`
}

// DeviceDeployment is one Deployment on a device's page: what the device
// should run (its fleet-intent value) and what it last reported.
type DeviceDeployment struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Generation and RevisionID are the desired revision (empty when the
	// device only reported it: it is no longer desired).
	Generation int64  `json:"generation,omitempty"`
	RevisionID string `json:"revisionId,omitempty"`
	// Desired is true when the device's desired state includes it.
	Desired bool `json:"desired"`
	// Reported is the device's latest workload report of the Deployment;
	// nil when it never reported it.
	Reported *WorkloadReport `json:"reported,omitempty"`
	// State is the device's state in this rollout: Succeeded, Failed,
	// Pending (desired revision not reported running yet) or Removed (no
	// longer desired).
	State TargetState `json:"state"`
}

// WorkloadReport is a device's workload report.
type WorkloadReport struct {
	Generation int64                `json:"generation"`
	RevisionID string               `json:"revisionId"`
	Phase      events.WorkloadPhase `json:"phase"`
	Error      string               `json:"error,omitempty"`
	// Time is when the stream stored the report.
	Time time.Time `json:"time"`
}

// DeviceTask is one task entry of a device's desired state.
type DeviceTask struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Task      string `json:"task"`
}

// TargetState is a target device's state in a rollout.
type TargetState string

// Target states.
const (
	TargetPending   TargetState = "Pending"
	TargetSucceeded TargetState = "Succeeded"
	TargetFailed    TargetState = "Failed"
	TargetRemoved   TargetState = "Removed"
)

// TimelineEntry is one event on a timeline.
type TimelineEntry struct {
	// Time is when the stream stored it.
	Time time.Time   `json:"time"`
	Type events.Type `json:"type"`
	// Device and Deployment (namespace/name) it concerns, when any.
	Device     string `json:"device,omitempty"`
	Deployment string `json:"deployment,omitempty"`
	Generation int64  `json:"generation,omitempty"`
	// Summary is one line, bounded.
	Summary string `json:"summary"`
	// Stage is the rollout stage after the event (Deployment timelines).
	Stage projections.Stage `json:"stage,omitempty"`
	// Ignored says why the rollout fold ignored a workload report.
	Ignored string `json:"ignored,omitempty"`
	// Stream and Sequence locate the event.
	Stream   string `json:"stream"`
	Sequence uint64 `json:"sequence"`
}

// DeploymentSummary is one row of the Deployment list and the head of its
// page: the Deployment's status as the operator patched it.
type DeploymentSummary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Phase is status.phase ("" before the operator's first patch).
	Phase string `json:"phase"`
	// Generation is metadata.generation; ObservedGeneration and
	// Revision the status's (Revision empty before the first revision).
	Generation         int64  `json:"generation"`
	ObservedGeneration int64  `json:"observedGeneration"`
	RevisionID         string `json:"revisionId,omitempty"`
	// Targets are the status counts: Total, Succeeded, Pending, Failed,
	// Removed and the canaries'.
	Targets TargetCounts `json:"targets"`
	// LatestFailure is the latest failing device, its error and when.
	LatestFailure *Failure `json:"latestFailure,omitempty"`
	// Ready is the Ready condition's reason and message.
	ReadyReason  string `json:"readyReason,omitempty"`
	ReadyMessage string `json:"readyMessage,omitempty"`
	// Canary is true when the Deployment gates on canaries.
	Canary bool `json:"canary,omitempty"`
	// Stalled, when set, says the current revision's rollout made no
	// progress within its progress deadline: its Progressing condition is
	// False with reason ProgressDeadlineExceeded.
	Stalled *Stalled `json:"stalled,omitempty"`
	// Degraded, when set, says devices run the current revision with
	// services that crash-loop, were OOM-killed, stay down or are
	// unhealthy: its Degraded condition is True, or (a Deployment page
	// whose status does not say so yet, a deleted Deployment) the
	// devices' health reports say so. The phase is unchanged by it.
	Degraded *Degraded `json:"degraded,omitempty"`
	// Created is metadata.creationTimestamp.
	Created time.Time `json:"created"`
}

// Stalled is a rollout past its progress deadline: since when (the
// deadline's end) and the Progressing condition's message (the waiting
// devices and their last report), bounded.
type Stalled struct {
	Since   time.Time `json:"since"`
	Message string    `json:"message"`
}

// Degraded is the degraded devices of a Deployment's current revision.
type Degraded struct {
	// Since is when the Degraded condition turned True (the first health
	// report's stored time when the page derives it from the streams).
	Since time.Time `json:"since,omitzero"`
	// Count is the number of degraded devices (status.counts.degraded, or
	// the devices of the health reports).
	Count int `json:"count"`
	// Message is the Degraded condition's message, bounded ("" when
	// derived from the streams).
	Message string `json:"message,omitempty"`
	// Devices are the degraded devices, sorted, at most MaxDegradedShown.
	Devices []DegradedDevice `json:"devices"`
}

// MaxDegradedShown bounds the degraded devices a page lists.
const MaxDegradedShown = 20

// DegradedDevice is one degraded device of a Deployment.
type DegradedDevice struct {
	Device string `json:"device"`
	// Reason is CrashLoop, OOMKilled, Down or Unhealthy.
	Reason string `json:"reason"`
	// Message names the services at fault, their exit and restarts, the
	// last lines they printed; bounded and cleaned.
	Message string `json:"message"`
	// Since is when the stream stored the device's Degraded report.
	Since time.Time `json:"since,omitzero"`
}

// TargetCounts are a rollout's target counts.
type TargetCounts struct {
	Total             int `json:"total"`
	Succeeded         int `json:"succeeded"`
	Pending           int `json:"pending"`
	Failed            int `json:"failed"`
	Removed           int `json:"removed"`
	Canaries          int `json:"canaries"`
	CanariesSucceeded int `json:"canariesSucceeded"`
	CanariesFailed    int `json:"canariesFailed"`
}

// Failure is a device's failure.
type Failure struct {
	Device string    `json:"device"`
	Error  string    `json:"error"`
	Time   time.Time `json:"time"`
}

// DeploymentDetail is a Deployment's page. Beyond the spec: per-device
// rollout state, the canary stage and the revision history, all the
// history package's folds of the streams.
type DeploymentDetail struct {
	DeploymentSummary
	// Services are the score's services (name and image).
	Services []Service `json:"services"`
	// Selector is the target selector's matchLabels.
	Selector []Label `json:"selector"`
	// Stage is the current revision's rollout stage as the rollout fold
	// folds it, and since when.
	Stage      projections.Stage `json:"stage,omitempty"`
	StageSince time.Time         `json:"stageSince,omitzero"`
	// CanaryStage describes the canary gate; nil for a Deployment without
	// canaries.
	CanaryStage *CanaryStage `json:"canaryStage,omitempty"`
	// Progress is the rollout of the current revision stage by stage:
	// the canaries, then each plan batch (or the release to every other
	// target without a plan). Empty before the first revision.
	Progress []StageProgress `json:"progress,omitempty"`
	// Plan is where a rollout with a plan is (batches, approval, pause,
	// rollback: status.plan); nil without one.
	Plan *PlanStage `json:"plan,omitempty"`
	// Follow is a Follow Deployment's followers and departures (ADR
	// 0026); nil for a Frozen one.
	Follow *FollowStage `json:"follow,omitempty"`
	// Devices is the per-device rollout state of the current revision,
	// sorted by state (Failed, Pending, Succeeded) then device, at most
	// MaxTargetsShown; DevicesTruncated when there are more.
	Devices          []TargetRow `json:"devices"`
	DevicesTruncated bool        `json:"devicesTruncated,omitempty"`
	// Revisions is the revision history, newest first.
	Revisions []RevisionRow `json:"revisions"`
	// Timeline is the recent rollout timeline, newest first, at most
	// MaxTimeline.
	Timeline []TimelineEntry `json:"timeline"`
	// Deleted is true when the Deployment is no longer in the cluster: the
	// page is its history, its summary the rollout fold's last state.
	Deleted bool `json:"deleted,omitempty"`
	// HistoryError says why the stream part could not be read; the
	// summary is still the CR's status.
	HistoryError string `json:"historyError,omitempty"`
}

// MaxTargetsShown bounds the per-device rows of a Deployment page.
const MaxTargetsShown = 1000

// Service is one service of a score.
type Service struct {
	Name  string `json:"name"`
	Image string `json:"image"`
}

// PlanStage is where a rollout with a plan is, from status.plan.
type PlanStage struct {
	// Batch is the last batch started (0: none yet), of Batches.
	Batch   int `json:"batch"`
	Batches int `json:"batches"`
	// AwaitingApproval is the batch waiting for an approval (0: none).
	AwaitingApproval int `json:"awaitingApproval,omitempty"`
	// Paused, by whom or by which failure.
	Paused      bool   `json:"paused,omitempty"`
	PausedBy    string `json:"pausedBy,omitempty"`
	PauseReason string `json:"pauseReason,omitempty"`
	// RolledBackTo is the generation handed back after a failure.
	RolledBackTo int64 `json:"rolledBackTo,omitempty"`
}

// StageProgress is one stage of a rollout: the canaries, a plan batch or
// the release.
type StageProgress struct {
	// Name is "Canaries", "Batch 2" or "Release".
	Name string `json:"name"`
	// Size is how many targets the stage has; Succeeded, Failed and
	// Pending count their latest reports (Pending: neither yet).
	Size      int `json:"size"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Pending   int `json:"pending"`
	// State is one of the Stage* states.
	State string `json:"state"`
	// By is who approved a batch (its rollout.approved).
	By string `json:"by,omitempty"`
}

// The states of a StageProgress.
const (
	StageWaiting          = "waiting"
	StageAwaitingApproval = "awaiting approval"
	StageRunning          = "running"
	StageSoaking          = "soaking"
	StageSucceeded        = "succeeded"
	StageFailed           = "failed"
	// StageNotStarted: the rollout ended before the stage started.
	StageNotStarted = "not started"
)

// CanaryStage is the canary gate of a rollout.
type CanaryStage struct {
	// Canaries, Succeeded, Failed, Pending count the canary targets.
	Canaries  int `json:"canaries"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Pending   int `json:"pending"`
	// Gate is "waiting" (canaries converging), "blocked" (a canary failed:
	// the release is blocked), or "passed" (released to every target).
	Gate string `json:"gate"`
}

// Canary gate values.
const (
	GateWaiting = "waiting"
	// GateConverged: every canary converged and the release has not
	// started yet (a plan waiting for the approval of its first batch).
	GateConverged = "converged"
	GateBlocked   = "blocked"
	GatePassed    = "passed"
)

// TargetRow is one target device's rollout state.
type TargetRow struct {
	Device string      `json:"device"`
	Canary bool        `json:"canary,omitempty"`
	State  TargetState `json:"state"`
	// Phase is the device's latest report of the revision ("" never).
	Phase events.WorkloadPhase `json:"phase,omitempty"`
	Error string               `json:"error,omitempty"`
	Since time.Time            `json:"since,omitzero"`
	// Reports counts its reports of the revision.
	Reports int `json:"reports"`
}

// RevisionRow is one revision of a Deployment.
type RevisionRow struct {
	Generation  int64     `json:"generation"`
	RevisionID  string    `json:"revisionId"`
	ScoreDigest string    `json:"scoreDigest"`
	Targets     int       `json:"targets"`
	Canaries    int       `json:"canaries"`
	Succeeded   int       `json:"succeeded"`
	Failed      int       `json:"failed"`
	Created     time.Time `json:"created"`
	// Current is true for the Deployment's current revision.
	Current bool `json:"current,omitempty"`
	// AsOf is the instant to pass to FleetAt to see the fleet as it was
	// when this revision was created.
	AsOf time.Time `json:"asOf"`
}

// FleetAt is the fleet as it was at a past time.
type FleetAt struct {
	At          time.Time         `json:"at"`
	Devices     []FleetDevice     `json:"devices"`
	Deployments []DeploymentAt    `json:"deployments"`
	Positions   map[string]uint64 `json:"positions"`
}

// FleetDevice is a device at a past time.
type FleetDevice struct {
	Device string `json:"device"`
	// Desired lists namespace/name@generation of its desired state.
	Desired []string `json:"desired"`
	// Reported are its latest workload reports by then.
	Reported []DeploymentReport `json:"reported"`
}

// DeploymentReport is a workload report of one Deployment.
type DeploymentReport struct {
	Deployment string `json:"deployment"`
	WorkloadReport
}

// DeploymentAt is a Deployment's rollout at a past time.
type DeploymentAt struct {
	Namespace     string            `json:"namespace"`
	Name          string            `json:"name"`
	Generation    int64             `json:"generation"`
	RevisionID    string            `json:"revisionId"`
	Phase         string            `json:"phase"`
	Stage         projections.Stage `json:"stage"`
	Targets       TargetCounts      `json:"targets"`
	LatestFailure *Failure          `json:"latestFailure,omitempty"`
	Deleted       bool              `json:"deleted,omitempty"`
}

// TaskRunSummary is one row of the TaskRun list.
type TaskRunSummary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Task      string `json:"task"`
	// AgentVersion is the agent artifact's version (agent-upgrade).
	AgentVersion string `json:"agentVersion,omitempty"`
	Phase        string `json:"phase"`
	Targets      int    `json:"targets"`
	Pending      int    `json:"pending"`
	Running      int    `json:"running"`
	Succeeded    int    `json:"succeeded"`
	Failed       int    `json:"failed"`
	// LatestFailure is the latest failing device.
	LatestFailure *Failure `json:"latestFailure,omitempty"`
	// Window is the maintenance window ("02:00 for 2h"), if any.
	Window  string    `json:"window,omitempty"`
	Created time.Time `json:"created"`
}

// TaskRunDetail is a TaskRun's page: every target's result (from the
// streams, whatever their number; the CR's status carries 50 at most).
type TaskRunDetail struct {
	TaskRunSummary
	Selector []Label         `json:"selector"`
	Results  []TaskResult    `json:"results"`
	Timeline []TimelineEntry `json:"timeline"`
	// HistoryError says why the stream part could not be read; Results
	// are then the CR status's.
	HistoryError string `json:"historyError,omitempty"`
}

// TaskResult is one target's task result.
type TaskResult struct {
	Device          string    `json:"device"`
	Phase           string    `json:"phase"`
	Message         string    `json:"message,omitempty"`
	AgentVersion    string    `json:"agentVersion,omitempty"`
	ChangedPackages int       `json:"changedPackages,omitempty"`
	Since           time.Time `json:"since,omitzero"`
}

// Severity of an alert.
type Severity string

// Severities.
const (
	SeverityCritical Severity = "critical"
	SeverityWarning  Severity = "warning"
)

// AlertKind says what an alert is about.
type AlertKind string

// Alert kinds.
const (
	// AlertDeviceStale: a device stopped heartbeating (stale or offline).
	AlertDeviceStale AlertKind = "device-stale"
	// AlertDeviceNeverConnected: a Device enrolled longer than
	// Options.NeverConnectedAfter ago has never sent a heartbeat.
	AlertDeviceNeverConnected AlertKind = "device-never-connected"
	// AlertDeploymentFailing: a Deployment's current revision has failed
	// targets (or its phase is Failed).
	AlertDeploymentFailing AlertKind = "deployment-failing"
	// AlertTaskRunFailing: a TaskRun has failed targets.
	AlertTaskRunFailing AlertKind = "taskrun-failing"
	// AlertRolloutStalled: a Deployment's rollout made no progress within
	// its progress deadline (Progressing False, ProgressDeadlineExceeded).
	AlertRolloutStalled AlertKind = "rollout-stalled"
	// AlertDeploymentDegraded: devices run a Deployment's current revision
	// with services that crash-loop, were OOM-killed, stay down or are
	// unhealthy (its Degraded condition is True).
	AlertDeploymentDegraded AlertKind = "deployment-degraded"
)

// Alert is one alert derived from state. Its ID is stable while its cause
// lasts and changes when the cause starts again (a device stale since
// another heartbeat, a Deployment failing at another generation), so an
// acknowledgement keyed by it covers exactly one episode.
type Alert struct {
	ID       string    `json:"id"`
	Kind     AlertKind `json:"kind"`
	Severity Severity  `json:"severity"`
	// Page is the page the alert is about.
	Page PageRef `json:"page"`
	// Since is when the cause started (the last heartbeat, the latest
	// failure).
	Since   time.Time `json:"since,omitzero"`
	Message string    `json:"message"`
}

// PageKind names a dashboard page.
type PageKind string

// Pages.
const (
	PageOverview    PageKind = "overview"
	PageDevices     PageKind = "devices"
	PageDevice      PageKind = "device"
	PageDeployments PageKind = "deployments"
	PageDeployment  PageKind = "deployment"
	PageTaskRuns    PageKind = "taskruns"
	PageTaskRun     PageKind = "taskrun"
	PageAlerts      PageKind = "alerts"
	PageTrend       PageKind = "trend"
)

// PageRef names one page: Key is the device id for PageDevice,
// namespace/name for PageDeployment and PageTaskRun, empty otherwise.
type PageRef struct {
	Kind PageKind `json:"kind"`
	Key  string   `json:"key,omitempty"`
}

// Change says which pages changed since the previous Change. Pages is
// sorted and has no duplicates. All says every page may have changed (more
// than MaxPagesPerChange did); Pages is then empty.
type Change struct {
	At    time.Time `json:"at"`
	All   bool      `json:"all,omitempty"`
	Pages []PageRef `json:"pages"`
}

// Affects reports whether the change affects page p.
func (c Change) Affects(p PageRef) bool {
	if c.All {
		return true
	}
	for _, q := range c.Pages {
		if q == p {
			return true
		}
	}
	return false
}

// Trend is the 24-hour trend: 24 hourly buckets, oldest first, the last one
// the current (partial) hour.
type Trend struct {
	Hours []TrendHour `json:"hours"`
	// HeartbeatsSince is when the live heartbeat count started (the
	// dashboard's start); hours before it count only the heartbeats the
	// telemetry stream still holds (the last few per device), so they are
	// marked Partial.
	HeartbeatsSince time.Time `json:"heartbeatsSince"`
}

// TrendHour is one hour of the trend.
type TrendHour struct {
	Start time.Time `json:"start"`
	// Heartbeats counted in the hour (see Trend.HeartbeatsSince).
	Heartbeats int `json:"heartbeats"`
	// Reports are workload, task and command reports stored in the hour;
	// Failures those reporting a failure (workload Failed, task Failed,
	// command failed).
	Reports  int `json:"reports"`
	Failures int `json:"failures"`
	// HeartbeatsPartial is true when the hour started before the live
	// heartbeat count did.
	HeartbeatsPartial bool `json:"heartbeatsPartial,omitempty"`
}

package events

// Type is an event type name. Names are string constants, listed with their
// fields and version history in docs/events.md; they are never derived from Go
// type names and never change once shipped. An incompatible change to a
// type's data bumps its schema version instead.
type Type string

// Intent events (stream FLEET_INTENT).
const (
	// TypeDeploymentRevisionCreated: a new revision of a Deployment (one per
	// generation) with its frozen targets and canaries.
	TypeDeploymentRevisionCreated Type = "deployment.revision.created"
	// TypeDeploymentRevisionTargets: one chunk of a revision's frozen target
	// list, when the list does not fit in the revision event.
	TypeDeploymentRevisionTargets Type = "deployment.revision.targets"
	// TypeDeploymentDeleted: the Deployment was deleted; every target removes
	// its workloads.
	TypeDeploymentDeleted Type = "deployment.deleted"
	// TypeTaskRunCreated: a TaskRun's task intent for its frozen targets.
	TypeTaskRunCreated Type = "taskrun.created"
	// TypeTaskRunTargets: one chunk of a TaskRun's frozen target list, when
	// the list does not fit in the creation event.
	TypeTaskRunTargets Type = "taskrun.targets"
	// TypeTaskRunDeleted: the TaskRun was deleted.
	TypeTaskRunDeleted Type = "taskrun.deleted"
)

// Rollout transitions (stream FLEET_ROLLOUT).
const (
	// TypeRolloutStarted: a revision's rollout began.
	TypeRolloutStarted Type = "rollout.started"
	// TypeRolloutCanaryStage: the revision was released to its canaries only.
	TypeRolloutCanaryStage Type = "rollout.canary-stage"
	// TypeRolloutCanariesConverged: every canary converged.
	TypeRolloutCanariesConverged Type = "rollout.canaries-converged"
	// TypeRolloutCanaryFailed: a canary failed; release is blocked.
	TypeRolloutCanaryFailed Type = "rollout.canary-failed"
	// TypeRolloutReleased: the revision was released to the remaining frozen
	// targets.
	TypeRolloutReleased Type = "rollout.released"
	// TypeRolloutSucceeded: every frozen target converged.
	TypeRolloutSucceeded Type = "rollout.succeeded"
	// TypeRolloutFailed: the rollout failed.
	TypeRolloutFailed Type = "rollout.failed"
	// TypeRolloutTargetRemoved: a frozen target was removed from the
	// revision's accounting (its Device was deleted or quarantined, or it
	// reported no result within the operator's target timeout); Device and
	// Error say which and why.
	TypeRolloutTargetRemoved Type = "rollout.target-removed"
	// TypeRolloutTargetAdded: a device that came to match a Follow
	// Deployment (spec.rollout.targets Follow, ADR 0026) joined the
	// revision as a target after it was frozen; Device, Reason and Change
	// say which, why and what changed.
	TypeRolloutTargetAdded Type = "rollout.target-added"
	// TypeRolloutBatchStarted: batch Batch of the revision's plan was handed
	// the revision (Released lists the devices).
	TypeRolloutBatchStarted Type = "rollout.batch-started"
	// TypeRolloutBatchSoaking: batch Batch met its success threshold; its
	// soak time runs.
	TypeRolloutBatchSoaking Type = "rollout.batch-soaking"
	// TypeRolloutBatchSucceeded: batch Batch met its success threshold and
	// held it through its soak.
	TypeRolloutBatchSucceeded Type = "rollout.batch-succeeded"
	// TypeRolloutBatchFailed: batch Batch can no longer meet its success
	// threshold; Device and Error name the latest failure.
	TypeRolloutBatchFailed Type = "rollout.batch-failed"
	// TypeRolloutAwaitingApproval: batch Batch waits for a manual approval.
	TypeRolloutAwaitingApproval Type = "rollout.awaiting-approval"
	// TypeRolloutApproved: By approved batch Batch (Request names the
	// request).
	TypeRolloutApproved Type = "rollout.approved"
	// TypeRolloutPaused: no new batch starts until resumed; By and Request
	// name who asked, or Error the failure that paused it.
	TypeRolloutPaused Type = "rollout.paused"
	// TypeRolloutResumed: By resumed a paused rollout.
	TypeRolloutResumed Type = "rollout.resumed"
	// TypeRolloutRolledBack: the devices Released lists (every device
	// handed the revision, when nil) are handed generation RollbackTo of
	// the same Deployment again, the last one whose rollout succeeded.
	TypeRolloutRolledBack Type = "rollout.rolled-back"
)

// Device reports (streams FLEET_REPORTS and FLEET_TELEMETRY).
const (
	// TypeDeviceHeartbeat: the agent is alive.
	TypeDeviceHeartbeat Type = "device.heartbeat"
	// TypeDeviceInventory: what the device is and its self-reported labels.
	TypeDeviceInventory Type = "device.inventory"
	// TypeWorkloadStatus: the state of one Deployment revision on the device.
	TypeWorkloadStatus Type = "device.workload.status"
	// TypeTaskStatus: the state of one TaskRun on the device.
	TypeTaskStatus Type = "device.task.status"
	// TypeCommandResult: the agent's answer to an agent command.
	TypeCommandResult Type = "device.command.result"
	// TypeWorkloadDegraded: a Deployment revision the device reported
	// Converged no longer runs well: a service crash-loops, was OOM-killed,
	// stays down or is unhealthy (ADR 0019).
	TypeWorkloadDegraded Type = "device.workload.degraded"
	// TypeWorkloadRecovered: a Degraded Deployment revision has run stably
	// for the recovery window again.
	TypeWorkloadRecovered Type = "device.workload.recovered"
	// TypeDeviceContainers: the state of every container the agent owns,
	// sent on change (device telemetry, like the heartbeat).
	TypeDeviceContainers Type = "device.containers"
	// TypeWorkloadFetch: the device's progress in fetching a revision's
	// images ahead of its release (spec.rollout.prefetch, ADR 0027).
	// Progress only: it never moves the rollout.
	TypeWorkloadFetch Type = "device.workload.fetch"
)

// Agent commands (stream FLEET_COMMANDS).
const (
	// TypeAgentCommand: an operation asked of one agent.
	TypeAgentCommand Type = "agent.command"
)

// Dashboard actions (stream FLEET_AUDIT): what an operator did through the
// dashboard, naming the user.
const (
	// TypeDashboardDeviceAction: an operator quarantined or released a
	// device, or asked its agent for a command.
	TypeDashboardDeviceAction Type = "dashboard.device.action"
	// TypeDashboardAlertAcknowledged: an operator acknowledged an alert.
	TypeDashboardAlertAcknowledged Type = "dashboard.alert.acknowledged"
	// TypeDeviceLogsRequested: someone asked to read a device's container
	// log (fleet logs or the dashboard), allowed or refused (ADR 0025).
	TypeDeviceLogsRequested Type = "device.logs.requested"
)

// TypeInfo describes one event type for the catalogue.
type TypeInfo struct {
	Type Type
	// Version is the current schema version of the type's data.
	Version int
	// Family is the subject family the type is stored under.
	Family Family
	// Report is the report kind of report types.
	Report ReportKind
}

// catalogue lists every type this build knows, in docs/events.md order. It
// is a literal, not a registry: adding a type means adding a line here, a
// data struct, and a section in docs/events.md (a test checks all three).
var catalogue = []TypeInfo{
	{TypeDeploymentRevisionCreated, 1, FamilyDeploymentIntent, ""},
	{TypeDeploymentRevisionTargets, 1, FamilyDeploymentIntent, ""},
	{TypeDeploymentDeleted, 1, FamilyDeploymentIntent, ""},
	{TypeTaskRunCreated, 1, FamilyTaskRunIntent, ""},
	{TypeTaskRunTargets, 1, FamilyTaskRunIntent, ""},
	{TypeTaskRunDeleted, 1, FamilyTaskRunIntent, ""},
	{TypeRolloutStarted, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutCanaryStage, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutCanariesConverged, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutCanaryFailed, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutReleased, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutSucceeded, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutFailed, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutTargetRemoved, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutTargetAdded, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutBatchStarted, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutBatchSoaking, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutBatchSucceeded, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutBatchFailed, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutAwaitingApproval, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutApproved, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutPaused, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutResumed, 1, FamilyDeploymentRollout, ""},
	{TypeRolloutRolledBack, 1, FamilyDeploymentRollout, ""},
	{TypeDeviceHeartbeat, 1, FamilyReport, ReportHeartbeat},
	{TypeDeviceInventory, 1, FamilyReport, ReportInventory},
	{TypeWorkloadStatus, 1, FamilyReport, ReportWorkload},
	{TypeTaskStatus, 1, FamilyReport, ReportTask},
	{TypeCommandResult, 1, FamilyReport, ReportCommand},
	{TypeWorkloadDegraded, 1, FamilyReport, ReportHealth},
	{TypeWorkloadRecovered, 1, FamilyReport, ReportHealth},
	{TypeDeviceContainers, 1, FamilyReport, ReportContainers},
	{TypeWorkloadFetch, 1, FamilyReport, ReportFetch},
	{TypeAgentCommand, 1, FamilyCommand, ""},
	{TypeDashboardDeviceAction, 1, FamilyDashboardDevice, ""},
	{TypeDashboardAlertAcknowledged, 1, FamilyDashboardAlert, ""},
	{TypeDeviceLogsRequested, 1, FamilyDashboardDevice, ""},
}

// Catalogue returns every event type this build knows.
func Catalogue() []TypeInfo { return append([]TypeInfo(nil), catalogue...) }

// Info returns the catalogue entry of t.
func (t Type) Info() (TypeInfo, bool) {
	for _, ti := range catalogue {
		if ti.Type == t {
			return ti, true
		}
	}
	return TypeInfo{}, false
}

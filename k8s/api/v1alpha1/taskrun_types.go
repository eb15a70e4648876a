package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TaskRun runs one bounded maintenance task, once, on the devices its
// selector matches when it is created. Its targets are frozen then (in the
// taskrun.created event): devices matched later are not part of it. The
// spec cannot change: a new task is a new TaskRun.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ftr;ftaskrun,categories=fleet
// +kubebuilder:printcolumn:name="Task",type=string,JSONPath=`.spec.task`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Targets",type=integer,JSONPath=`.status.counts.targets`
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.counts.succeeded`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.counts.failed`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (at most 63 lowercase letters, digits and '-', no dots): it is a NATS subject token"
type TaskRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TaskRunSpec   `json:"spec"`
	Status TaskRunStatus `json:"status,omitempty"`
}

// TaskName names a fixed maintenance operation of the root updater.
// +kubebuilder:validation:Enum=system-upgrade;agent-upgrade
type TaskName string

// Task names (the same strings as events.TaskSystemUpgrade and
// events.TaskAgentUpgrade).
const (
	// TaskSystemUpgrade is an apt full-upgrade run by the root updater.
	TaskSystemUpgrade TaskName = "system-upgrade"
	// TaskAgentUpgrade installs the agent executable spec.agent names and
	// restores the previous one if the new one does not come back.
	TaskAgentUpgrade TaskName = "agent-upgrade"
)

// TaskRunSpec is the task and its targets. It is immutable.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: create a new TaskRun (with another name) to run another task or reach other devices"
// +kubebuilder:validation:XValidation:rule="self.task == 'agent-upgrade' ? has(self.agent) : !has(self.agent)",message="agent is required when task is agent-upgrade and must be absent otherwise"
type TaskRunSpec struct {
	// Task to run.
	Task TaskName `json:"task"`
	// Agent is the agent executable an agent-upgrade installs; required for
	// agent-upgrade, absent otherwise.
	// +optional
	Agent *AgentArtifact `json:"agent,omitempty"`
	// AllowedGroups restricts targets to members of these device groups. It
	// is enforced only when the operator has a group source; without one, a
	// TaskRun that sets it matches no device (fail closed) and says so in
	// the TargetsResolved condition.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	AllowedGroups []string `json:"allowedGroups,omitempty"`
	// TargetSelector selects devices by their labels.
	TargetSelector TargetSelector `json:"targetSelector"`
	// MaintenanceWindow, when set, lets each device start the task only
	// inside a daily window of its own local time; a device offline
	// during the window runs it in its next window. Not in the product
	// description (which has no schedules): a Fleet extension. The same
	// type as a Deployment's spec.rollout.maintenanceWindow (ADR 0029).
	// +optional
	MaintenanceWindow *MaintenanceWindow `json:"maintenanceWindow,omitempty"`
}

// AgentArtifact is an agent executable: where the device downloads it, its
// sha256 (checked before anything is installed) and the version the new
// agent must report to be kept.
type AgentArtifact struct {
	// URL of the executable, https:// or http:// (the sha256 protects it).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('https://') || self.startsWith('http://')",message="agent.url must start with https:// or http://"
	URL string `json:"url"`
	// SHA256 of the executable, 64 lowercase hex digits.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{64}$`
	SHA256 string `json:"sha256"`
	// Version the new agent reports in its heartbeat.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Version string `json:"version"`
}

// TaskRunPhase summarises the task on its frozen targets.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type TaskRunPhase string

// TaskRun phases. Succeeded and Failed are final.
const (
	// TaskRunPending: targets are resolved and none has reported
	// Running or a result yet (or the targets are not frozen yet).
	TaskRunPending TaskRunPhase = "Pending"
	// TaskRunRunning: at least one target reported Running or a result,
	// and at least one has not finished.
	TaskRunRunning TaskRunPhase = "Running"
	// TaskRunSucceeded: every target (at least one) succeeded.
	TaskRunSucceeded TaskRunPhase = "Succeeded"
	// TaskRunFailed: every target finished and at least one failed; or
	// the TaskRun has no target at all (Ready says NoTargets), which can
	// never succeed since the targets are frozen and the spec immutable.
	TaskRunFailed TaskRunPhase = "Failed"
)

// TaskRunStatus summarises the task on its frozen targets, folded from the
// devices' task reports in stream order.
type TaskRunStatus struct {
	// ObservedGeneration is the generation the status describes (a TaskRun
	// has only generation 1: its spec is immutable).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	Phase TaskRunPhase `json:"phase,omitempty"`
	// +optional
	Counts TaskRunCounts `json:"counts,omitempty"`
	// LatestFailure is the most recent failure a target reported.
	// +optional
	LatestFailure *TaskFailure `json:"latestFailure,omitempty"`
	// Results are the per-device results, sorted by device, when the
	// TaskRun has at most MaxTaskRunResults targets (omitted above: `fleet
	// history taskrun <namespace>/<name>` shows them for any size).
	// +optional
	// +kubebuilder:validation:MaxItems=50
	// +listType=map
	// +listMapKey=device
	Results []TaskDeviceResult `json:"results,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// MaxTaskRunResults bounds TaskRunStatus.Results.
const MaxTaskRunResults = 50

// TaskRunCounts count the frozen targets by the phase they last reported.
type TaskRunCounts struct {
	// Targets is the number of frozen targets; the others add up to it.
	Targets int32 `json:"targets"`
	// Pending: no report yet, or Pending reported.
	Pending   int32 `json:"pending"`
	Running   int32 `json:"running"`
	Succeeded int32 `json:"succeeded"`
	Failed    int32 `json:"failed"`
}

// TaskFailure is one device's failure of the task.
type TaskFailure struct {
	Device  string      `json:"device"`
	Message string      `json:"message"`
	Time    metav1.Time `json:"time"`
}

// TaskDeviceResult is what one target last reported.
type TaskDeviceResult struct {
	Device string `json:"device"`
	// Phase is Pending (no report yet), Running, Succeeded or Failed.
	Phase string `json:"phase"`
	// Message is the error of a failure.
	// +optional
	Message string `json:"message,omitempty"`
	// AgentVersion is the agent version reported after an agent-upgrade.
	// +optional
	AgentVersion string `json:"agentVersion,omitempty"`
	// ChangedPackages is how many packages a system-upgrade changed.
	// +optional
	ChangedPackages int32 `json:"changedPackages,omitempty"`
	// Since is when the device entered the phase (absent: no report yet).
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// TaskRunList is a list of TaskRuns.
//
// +kubebuilder:object:root=true
type TaskRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TaskRun `json:"items"`
}

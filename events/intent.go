package events

import "encoding/json"

// DeviceIntent is the value of a device's fleet-intent KV key: everything the
// device must run, one entry per (namespace, Deployment), sorted by
// namespace then name. The operator's projection writes it; the agent reads
// it. Secret values are never part of it: scores carry references only.
type DeviceIntent struct {
	Device      string        `json:"device"`
	Deployments []IntentEntry `json:"deployments"`
	// Tasks are the TaskRuns' tasks the device must run, each at most
	// once, sorted by namespace then TaskRun name. A task leaves the
	// value when its TaskRun is deleted; one already running is never
	// interrupted for that.
	Tasks []TaskEntry `json:"tasks,omitempty"`
	// Fetch are revisions the device may fetch the images of before it is
	// handed them (spec.rollout.prefetch, ADR 0027), sorted by namespace
	// then name: never run, only pulled. Absent unless a Deployment asks
	// for it.
	Fetch []FetchEntry `json:"fetch,omitempty"`
}

// FetchEntry is one Deployment revision whose images a device may fetch
// ahead of its release: the revision's identity and score (the agent reads
// the images and their pull secrets from it, never a secret value).
type FetchEntry struct {
	Namespace  string          `json:"namespace"`
	Name       string          `json:"name"`
	UID        string          `json:"uid"`
	Generation int64           `json:"generation"`
	RevisionID string          `json:"revisionId"`
	Score      json.RawMessage `json:"score"`
	// Window is the revision's fetch window
	// (DeploymentRevisionCreated.FetchWindow, ADR 0029): the device starts
	// the fetch only while it is open in its local time. Nil: at once.
	Window *MaintenanceWindow `json:"window,omitempty"`
}

// Task names: the closed set of maintenance operations (the root updater
// knows nothing else).
const (
	// TaskSystemUpgrade: apt-get update, then a non-interactive
	// full-upgrade keeping existing configuration files.
	TaskSystemUpgrade = "system-upgrade"
	// TaskAgentUpgrade: install the agent executable TaskEntry.Agent names,
	// restart the agent, and restore the previous one if the new one does
	// not come back reporting its version.
	TaskAgentUpgrade = "agent-upgrade"
)

// Task phases a device reports in device.task.status.
const (
	TaskPending   = "Pending"
	TaskRunning   = "Running"
	TaskSucceeded = "Succeeded"
	TaskFailed    = "Failed"
)

// TaskEntry is one TaskRun's task for a device.
type TaskEntry struct {
	Namespace string `json:"namespace"`
	// TaskRun is the TaskRun's name; UID its uid (the task's identity: a
	// device runs a task of one UID at most once).
	TaskRun string `json:"taskRun"`
	UID     string `json:"uid"`
	// Task is TaskSystemUpgrade or TaskAgentUpgrade.
	Task string `json:"task"`
	// Agent is the executable of an agent-upgrade (nil otherwise).
	Agent *AgentArtifact `json:"agent,omitempty"`
	// Window, when set, is the daily window in the device's local time
	// inside which the task may start; nil: at once.
	Window *MaintenanceWindow `json:"window,omitempty"`
}

// AgentArtifact is an agent executable to install: where to download it,
// its sha256 (checked before anything is installed) and the version the
// new agent must report to be kept.
type AgentArtifact struct {
	URL     string `json:"url"`
	SHA256  string `json:"sha256"`
	Version string `json:"version"`
}

// PackageChange is one package a system-upgrade changed.
type PackageChange struct {
	Package string `json:"package"`
	// From is the version before ("" when newly installed); To the version
	// after ("" when removed).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// IntentEntry is one Deployment revision a device must run.
type IntentEntry struct {
	Namespace   string          `json:"namespace"`
	Name        string          `json:"name"`
	UID         string          `json:"uid"`
	Generation  int64           `json:"generation"`
	RevisionID  string          `json:"revisionId"`
	ScoreDigest string          `json:"scoreDigest"`
	Score       json.RawMessage `json:"score"`
	// MinReadySeconds is the revision's stability period
	// (DeploymentRevisionCreated.MinReadySeconds): the device reports the
	// revision Converged only after every service ran that long, and
	// Failed when one dies within it. 0: Converged as soon as it applied.
	MinReadySeconds int64 `json:"minReadySeconds,omitempty"`
	// Signatures is the revision's image trust policy
	// (DeploymentRevisionCreated.Signatures); nil: images are not
	// checked.
	Signatures *SignaturePolicy `json:"signatures,omitempty"`
	// Window is the revision's maintenance window
	// (DeploymentRevisionCreated.Window, ADR 0029): a device that does
	// not run the revision yet switches to it only while the window is
	// open in its local time, and otherwise reports it Pending with
	// WorkloadStatus.WindowOpens. Nil: at once.
	Window *MaintenanceWindow `json:"window,omitempty"`
}

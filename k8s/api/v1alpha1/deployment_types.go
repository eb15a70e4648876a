package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nationtech/harmony-fleet/score"
)

// Deployment deploys a Podman workload to the devices its selector matches.
// Each generation is one rollout revision, identified by (UID, generation):
// its target and canary sets are frozen when the revision is created.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=fdeploy;fdeployment,categories=fleet
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Targets",type=integer,JSONPath=`.status.counts.total`
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.counts.succeeded`
// +kubebuilder:printcolumn:name="Failed",type=integer,JSONPath=`.status.counts.failed`
// +kubebuilder:printcolumn:name="Degraded",type=integer,JSONPath=`.status.counts.degraded`
// +kubebuilder:printcolumn:name="Followers",type=integer,JSONPath=`.status.counts.followers`,priority=1
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.status.revision.id`
// +kubebuilder:printcolumn:name="Prefetched",type=integer,JSONPath=`.status.prefetched`,priority=1
// +kubebuilder:printcolumn:name="Window-Waiting",type=integer,JSONPath=`.status.window.waiting`,priority=1
// +kubebuilder:printcolumn:name="Window-Opens",type=string,JSONPath=`.status.window.nextOpening`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (at most 63 lowercase letters, digits and '-', no dots): it is a NATS subject token"
type Deployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DeploymentSpec   `json:"spec"`
	Status DeploymentStatus `json:"status,omitempty"`
}

// DeploymentSpec is the desired workload and its placement.
type DeploymentSpec struct {
	// AllowedGroups restricts targets to members of these device groups. It is
	// enforced only when the operator has a group source; without one, a
	// Deployment that sets it matches no device (fail closed) and says so in
	// the TargetsResolved condition.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	AllowedGroups []string `json:"allowedGroups,omitempty"`

	// TargetSelector selects devices by their labels.
	TargetSelector TargetSelector `json:"targetSelector"`

	// Rollout says how a revision is released.
	// +optional
	Rollout RolloutSpec `json:"rollout,omitempty"`

	// Score is the workload.
	Score score.Score `json:"score"`

	// Signatures, when set, is the trust policy of the Deployment's
	// images (ADR 0023): devices run only images one of its keys signed.
	// Frozen with the revision. Unset: images are not checked.
	// +optional
	Signatures *SignaturePolicy `json:"signatures,omitempty"`
}

// TargetSelector selects devices by label equality.
type TargetSelector struct {
	// MatchLabels: every pair must be present on a device's labels.
	// +optional
	MatchLabels map[string]string `json:"matchLabels,omitempty"`
}

// RolloutStrategy names how a revision is released.
// +kubebuilder:validation:Enum=Immediate
type RolloutStrategy string

// RolloutTargets names what a revision's targets are after it was frozen
// (ADR 0026).
type RolloutTargets string

// Rollout target modes.
const (
	// RolloutTargetsFrozen: the targets are the devices that matched when
	// the revision was created (the default).
	RolloutTargetsFrozen RolloutTargets = "Frozen"
	// RolloutTargetsFollow: devices that come to match join the current
	// revision, devices that stop matching leave it.
	RolloutTargetsFollow RolloutTargets = "Follow"
)

// RolloutImmediate starts the rollout without approval; devices labelled
// canary=true converge first, then the rest of the frozen targets.
const RolloutImmediate RolloutStrategy = "Immediate"

// RolloutSpec configures the rollout. Immediate is the only strategy: the
// canaries (targets labelled canary=true) converge first, then the rest of
// the frozen targets. The other fields are opt-in (ADR 0016): batches after
// the canary stage, each with a success threshold and an optional soak,
// manual approval before each batch, and a pause instead of a failure when
// a batch fails. A rollout that sets none of them (or only their defaults)
// releases every non-canary target at once, exactly as before. There is no
// workload rollback yet.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReady) || !has(self.progressDeadline) || duration(self.minReady) <= duration(self.progressDeadline)",message="rollout.minReady must not be longer than rollout.progressDeadline"
// +kubebuilder:validation:XValidation:rule="!has(self.fetchWindow) || (has(self.prefetch) && self.prefetch)",message="rollout.fetchWindow needs rollout.prefetch: true (without prefetch a device pulls the images when it switches, inside rollout.maintenanceWindow): set prefetch, or remove fetchWindow"
type RolloutSpec struct {
	// Targets says what a revision's targets are after it was frozen.
	// Frozen (the default, also when absent): the devices that matched
	// when the revision was created, as the product description says;
	// devices that come to match later get nothing until the next
	// generation. Follow (ADR 0026): the Deployment is the fleet's
	// standing state; a device that comes to match (enrolled, relabelled,
	// released from quarantine, no longer a duplicate device id) joins the
	// current revision (rollout.target-added), and one that stops
	// matching leaves it and its agent removes the workload
	// (rollout.target-removed; after the operator's --follow-debounce for a
	// label change, at once for a quarantine or a deletion). With a plan, a
	// device that joins is in the first selector batch its labels match,
	// else in the plan's last batch: it waits for that batch and its
	// approval, and counts in the disruption budget (a label value the
	// plan does not know is a group of its own), also after the rollout
	// ended.
	// +optional
	// +kubebuilder:validation:Enum=Frozen;Follow
	Targets RolloutTargets `json:"targets,omitempty"`

	// Strategy of the rollout.
	// +kubebuilder:default=Immediate
	// +optional
	Strategy RolloutStrategy `json:"strategy,omitempty"`

	// Batches release the revision to the non-canary targets in steps,
	// after the canary stage. They are resolved against the frozen targets
	// when the revision is created: selector batches claim their targets
	// first, in list order; count and percent batches then take the next
	// unclaimed targets in device-id order. A batch that resolves to no
	// device is dropped (the TargetsResolved condition says so), and
	// targets no batch took form one last batch (success threshold 100,
	// no soak). Empty: every non-canary target at once.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Batches []RolloutBatch `json:"batches,omitempty"`

	// Approval Manual holds the rollout before each batch until someone
	// approves it; Automatic (the default) starts each batch as soon as
	// the previous one succeeded.
	// +optional
	// +kubebuilder:default=Automatic
	Approval RolloutApproval `json:"approval,omitempty"`

	// OnFailure is what a batch (or the canary stage) that can no longer
	// reach its success threshold does: Fail (the default) fails the
	// rollout; Pause pauses it (no new batch starts until it is resumed);
	// Rollback hands the devices that received the failed revision the
	// last revision of this Deployment whose rollout succeeded, and fails
	// the rollout saying so (without such a revision it fails as Fail).
	// +optional
	// +kubebuilder:default=Fail
	OnFailure RolloutOnFailure `json:"onFailure,omitempty"`

	// DisruptionBudget limits how many targets sharing a label value are
	// between revisions at once (handed the revision and not yet Converged
	// or Failed): each batch is handed in waves that respect it. Setting it
	// gives the rollout a plan (one batch of every non-canary target when
	// batches are not set).
	// +optional
	DisruptionBudget *DisruptionBudget `json:"disruptionBudget,omitempty"`

	// ProgressDeadline is how long the rollout may make no progress (no
	// transition, no target's first report of the revision and no target's
	// first Converged or Failed) while targets wait, before its Progressing
	// condition turns False with reason ProgressDeadlineExceeded and the
	// FleetRolloutProgressDeadlineExceeded alert fires: 30s to 24h, in
	// hours, minutes and seconds ("90s", "5m", "1h30m"). It decides
	// nothing: the rollout goes on, and the operator's target timeout
	// still removes a silent target. Absent: the operator's
	// --progress-deadline (default 10m). A pause, an approval wait and a
	// batch's soak stop the clock.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,2}h)?([0-9]{1,4}m)?([0-9]{1,5}s)?$') && self != '' && duration(self) >= duration('30s') && duration(self) <= duration('24h')",message="rollout.progressDeadline must be hours, minutes and seconds from 30s to 24h, e.g. 90s, 10m or 1h30m"
	ProgressDeadline *metav1.Duration `json:"progressDeadline,omitempty"`

	// MinReady is how long every service of the revision must run on a
	// device before the device counts as Converged (Kubernetes'
	// minReadySeconds): a service that dies within it fails the device,
	// and the canary gate, batch thresholds and onFailure apply as for
	// any failure. 0s to 15m, in hours, minutes and seconds ("30s",
	// "2m"); at most progressDeadline when both are set. Absent or 0s:
	// Converged as soon as the revision applied, as before (ADR 0019).
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,2}h)?([0-9]{1,4}m)?([0-9]{1,5}s)?$') && self != '' && duration(self) >= duration('0s') && duration(self) <= duration('15m')",message="rollout.minReady must be hours, minutes and seconds from 0s to 15m, e.g. 30s or 2m"
	MinReady *metav1.Duration `json:"minReady,omitempty"`

	// Prefetch lets every frozen target fetch the revision's images as
	// soon as the revision is created, before the rollout hands it the
	// revision (ADR 0027): the switch (stop old, start new) still follows
	// the canary stage, the batches, approvals and the disruption budget,
	// but no longer waits for the download. status.prefetched counts the
	// targets holding the images. Absent or false: a device pulls when it
	// is handed the revision, as before.
	// +optional
	Prefetch bool `json:"prefetch,omitempty"`

	// MaintenanceWindow, when set, lets each target switch to a revision
	// (stop the old containers, start the new ones) only inside a daily
	// window of its own local time (ADR 0029): the same window type as a
	// TaskRun's spec.maintenanceWindow. A target handed the revision
	// outside its window keeps running what it runs and reports the
	// revision Pending with when its window opens; status.window counts
	// those targets. A switch that began inside the window runs to its
	// end. Waiting targets never count as failed or stuck: the target
	// timeout runs from their window's opening, and the progress deadline
	// does not run while every target without a result waits for its
	// window. Frozen with the revision. Absent: a target switches as soon
	// as it is handed the revision, as before.
	// +optional
	MaintenanceWindow *MaintenanceWindow `json:"maintenanceWindow,omitempty"`

	// FetchWindow, with prefetch, lets each target fetch the revision's
	// images ahead only inside a daily window of its own local time (ADR
	// 0029); absent, a prefetch target fetches at once, whatever
	// maintenanceWindow says. Frozen with the revision. Requires
	// prefetch: without it a target pulls when it switches.
	// +optional
	FetchWindow *MaintenanceWindow `json:"fetchWindow,omitempty"`
}

// DisruptionBudget groups the targets by the value of a label and bounds
// how many of each group are between revisions at once.
//
// +kubebuilder:validation:XValidation:rule="type(self.maxUnavailable) == int ? self.maxUnavailable >= 1 : self.maxUnavailable.matches('^([1-9][0-9]?|100)%$')",message="rollout.disruptionBudget.maxUnavailable must be a count of at least 1 or a percentage from 1% to 100%"
type DisruptionBudget struct {
	// LabelKey groups the targets by its value (e.g. site); targets
	// without the label form one group of their own.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	LabelKey string `json:"labelKey"`
	// MaxUnavailable is a count (at least 1) or a percentage of each
	// group ("10%", rounded down); a group always gets at least one.
	// +kubebuilder:validation:XIntOrString
	MaxUnavailable intstr.IntOrString `json:"maxUnavailable"`
}

// MaxRolloutBatches is the most batches a rollout lists.
const MaxRolloutBatches = 32

// RolloutBatch is one batch of a rollout: exactly one of Count, Percent and
// Selector says which targets it takes.
//
// +kubebuilder:validation:XValidation:rule="(has(self.count) ? 1 : 0) + (has(self.percent) ? 1 : 0) + (has(self.selector) ? 1 : 0) == 1",message="rollout.batches[]: set exactly one of count, percent and selector"
// +kubebuilder:validation:XValidation:rule="!has(self.selector) || (has(self.selector.matchLabels) && size(self.selector.matchLabels) > 0)",message="rollout.batches[].selector.matchLabels must name at least one label: use count or percent for a batch of any targets"
type RolloutBatch struct {
	// Count of targets the batch takes (fewer when fewer remain).
	// +optional
	// +kubebuilder:validation:Minimum=1
	Count *int32 `json:"count,omitempty"`
	// Percent of all frozen targets (canaries included) the batch takes,
	// rounded up, at least 1 (fewer when fewer remain).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	Percent *int32 `json:"percent,omitempty"`
	// Selector takes the non-canary targets whose labels match, except
	// those an earlier selector batch took.
	// +optional
	Selector *TargetSelector `json:"selector,omitempty"`
	// SuccessThreshold is the percentage (1..100) of the batch's targets
	// that must converge for the batch to succeed.
	// +optional
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SuccessThreshold int32 `json:"successThreshold,omitempty"`
	// Soak is how long the threshold must hold before the batch succeeds:
	// hours, minutes and seconds up to 24h ("90s", "5m", "1h30m").
	// Absent: no soak.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]{1,2}h)?([0-9]{1,4}m)?([0-9]{1,5}s)?$') && self != '' && duration(self) <= duration('24h')",message="rollout.batches[].soak must be hours, minutes and seconds up to 24h, e.g. 90s, 5m or 1h30m"
	Soak string `json:"soak,omitempty"`
}

// RolloutApproval says whether a batch waits for approval.
// +kubebuilder:validation:Enum=Automatic;Manual
type RolloutApproval string

// Rollout approvals.
const (
	// RolloutApprovalAutomatic starts each batch as soon as the previous
	// one succeeded (the default).
	RolloutApprovalAutomatic RolloutApproval = "Automatic"
	// RolloutApprovalManual holds the rollout before each batch until it
	// is approved.
	RolloutApprovalManual RolloutApproval = "Manual"
)

// RolloutOnFailure says what a failed batch does.
// +kubebuilder:validation:Enum=Fail;Pause;Rollback
type RolloutOnFailure string

// Rollout failure policies.
const (
	// RolloutOnFailureFail fails the rollout (the default).
	RolloutOnFailureFail RolloutOnFailure = "Fail"
	// RolloutOnFailurePause pauses the rollout: no new batch starts until
	// it is resumed.
	RolloutOnFailurePause RolloutOnFailure = "Pause"
	// RolloutOnFailureRollback hands the devices that received the failed
	// revision the last revision whose rollout succeeded.
	RolloutOnFailureRollback RolloutOnFailure = "Rollback"
)

// DeploymentPhase summarises the current revision's rollout.
type DeploymentPhase string

// Deployment phases.
const (
	PhasePending     DeploymentPhase = "Pending"
	PhaseCanary      DeploymentPhase = "Canary"
	PhaseProgressing DeploymentPhase = "Progressing"
	PhaseSucceeded   DeploymentPhase = "Succeeded"
	PhaseFailed      DeploymentPhase = "Failed"
)

// DeploymentStatus describes exactly one revision: Revision says which.
type DeploymentStatus struct {
	// ObservedGeneration is the generation the phase, counts and Ready
	// condition describe (the generation of Revision). It moves to a new
	// generation only together with a phase of that generation, so
	// `kubectl wait --for=condition=Ready` right after an apply waits for
	// the applied generation.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Revision the rest of the status describes.
	// +optional
	Revision *RevisionRef `json:"revision,omitempty"`
	// +optional
	Phase DeploymentPhase `json:"phase,omitempty"`
	// +optional
	Counts RolloutCounts `json:"counts,omitempty"`
	// Prefetched is how many of the revision's frozen targets reported
	// holding its images after fetching them ahead of their release
	// (spec.rollout.prefetch, ADR 0027); absent without prefetch.
	// +optional
	Prefetched *int32 `json:"prefetched,omitempty"`
	// Window is how many targets wait for their maintenance window
	// (spec.rollout.maintenanceWindow, ADR 0029) and when the earliest
	// of those windows opens; absent for a revision without a window.
	// +optional
	Window *WindowStatus `json:"window,omitempty"`
	// LatestFailure is the most recent device failure of this revision.
	// +optional
	LatestFailure *DeviceFailure `json:"latestFailure,omitempty"`
	// Removed are frozen targets removed from this revision's accounting:
	// their Device was deleted or quarantined, or they reported no result
	// within the operator's target timeout. They count in no total. The
	// first MaxRemovedListed are listed; counts.removed has the number.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Removed []RemovedTarget `json:"removed,omitempty"`
	// Followers are the targets that joined this revision after it was
	// frozen, because the Deployment follows its selector
	// (spec.rollout.targets Follow, ADR 0026): the device, why it joined,
	// the label or membership change, and when. They count in every
	// count like the frozen targets; counts.followers has their number,
	// the first MaxFollowersListed are listed. A follower that leaves
	// goes to removed.
	// +optional
	// +kubebuilder:validation:MaxItems=100
	Followers []Follower `json:"followers,omitempty"`
	// Plan is where a rollout with a plan (batches, approval, a failure
	// policy or a disruption budget) is, or a paused one; absent for the
	// spec's rollout.
	// +optional
	Plan *PlanStatus `json:"plan,omitempty"`
	// Degraded are the devices that reported the revision they run
	// degraded after it converged (a crash loop, an OOM kill, a service
	// down or unhealthy; ADR 0019): the first MaxDegradedListed by device
	// id; counts.degraded has the number. Health never changes the phase,
	// the counts or Ready: a rollout that succeeded stays Succeeded, and
	// the Degraded condition says what runs badly since.
	// +optional
	// +kubebuilder:validation:MaxItems=20
	Degraded []DegradedDevice `json:"degraded,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WindowStatus is where the targets of a revision with a maintenance
// window stand (ADR 0029).
type WindowStatus struct {
	// Waiting is how many targets handed the revision last reported it
	// Pending because their window is closed. They count in
	// counts.pending, never in counts.failed.
	Waiting int32 `json:"waiting"`
	// NextOpening is the earliest time one of their windows opens (the
	// operator's clock: the report's stored time plus the wait the device
	// reported); absent when none waits.
	// +optional
	NextOpening *metav1.Time `json:"nextOpening,omitempty"`
}

// PlanStatus is where a rollout with a plan is (ADR 0016).
type PlanStatus struct {
	// Batch is the last batch started (0: none yet), of Batches.
	Batch   int32 `json:"batch"`
	Batches int32 `json:"batches"`
	// AwaitingApproval is the batch that waits for an approval (0: none):
	// the one `fleet rollout approve` approves without --batch.
	// +optional
	AwaitingApproval int32 `json:"awaitingApproval,omitempty"`
	// Paused: no target is handed the revision until resumed. PausedBy is
	// who paused it; PauseReason the batch failure that paused it.
	// +optional
	Paused bool `json:"paused,omitempty"`
	// +optional
	PausedBy string `json:"pausedBy,omitempty"`
	// +optional
	PauseReason string `json:"pauseReason,omitempty"`
	// RolledBackTo is the generation the revision's devices were handed
	// back after it failed (onFailure Rollback).
	// +optional
	RolledBackTo int64 `json:"rolledBackTo,omitempty"`
}

// RevisionRef identifies a revision.
type RevisionRef struct {
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	ID         string `json:"id"`
}

// MaxRemovedListed is how many removed targets a Deployment status lists.
const MaxRemovedListed = 100

// MaxDegradedListed is how many degraded devices a Deployment status
// lists.
const MaxDegradedListed = 20

// DegradedDevice is a device that reported its revision of the Deployment
// degraded.
type DegradedDevice struct {
	Device string `json:"device"`
	// Revision is the id of the revision the device runs degraded (the
	// current one, or an older one it was not yet handed a newer one of).
	Revision string `json:"revision"`
	// Reason is CrashLoop, OOMKilled, Down or Unhealthy.
	// +kubebuilder:validation:MaxLength=256
	Reason string `json:"reason"`
	// Message names the services at fault, their last exit and restarts.
	// +kubebuilder:validation:MaxLength=256
	Message string `json:"message"`
	// Since is when the control plane stored the device's first report
	// of this degradation.
	Since metav1.Time `json:"since"`
}

// RemovedTarget is a frozen target removed from a revision's accounting,
// and why.
type RemovedTarget struct {
	Device string `json:"device"`
	Reason string `json:"reason"`
}

// Follower is a target that joined a revision after it was frozen (ADR
// 0026).
type Follower struct {
	Device string `json:"device"`
	// Reason is why it joined: Device created, labels changed, quarantine
	// lifted, duplicate device id cleared, group membership.
	Reason string `json:"reason"`
	// Change is the label or membership change, e.g. "site=lyon (was
	// site=paris)".
	// +optional
	Change string `json:"change,omitempty"`
	// Since is when the control plane stored its rollout.target-added.
	Since metav1.Time `json:"since"`
	// Revision, when set, is the revision the follower was handed instead
	// of status.revision: that one's rollout failed, so it runs the
	// Deployment's last revision whose rollout succeeded. It is no target
	// of status.revision and in none of its counts.
	// +optional
	Revision *RevisionRef `json:"revision,omitempty"`
}

// MaxFollowersListed is how many followers a Deployment status lists.
const MaxFollowersListed = 100

// RolloutCounts are the revision's target counts. Removed targets are in
// none of the others.
type RolloutCounts struct {
	// Followers is how many of Total joined after the revision was frozen
	// (spec.rollout.targets Follow).
	// +optional
	Followers int32 `json:"followers,omitempty"`
	// Removed is how many frozen targets were removed from the accounting.
	// +optional
	Removed int32 `json:"removed,omitempty"`
	// Degraded is how many devices report the revision they run degraded
	// (status.degraded lists them). It is in none of the other counts.
	// +optional
	Degraded          int32 `json:"degraded,omitempty"`
	Total             int32 `json:"total"`
	Succeeded         int32 `json:"succeeded"`
	Pending           int32 `json:"pending"`
	Failed            int32 `json:"failed"`
	Canaries          int32 `json:"canaries"`
	CanariesSucceeded int32 `json:"canariesSucceeded"`
	CanariesFailed    int32 `json:"canariesFailed"`
}

// DeviceFailure is one device's error.
type DeviceFailure struct {
	Device string      `json:"device"`
	Error  string      `json:"error"`
	Time   metav1.Time `json:"time"`
}

// DeploymentList is a list of Deployments.
//
// +kubebuilder:object:root=true
type DeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Deployment `json:"items"`
}

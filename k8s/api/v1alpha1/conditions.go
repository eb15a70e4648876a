package v1alpha1

// Condition types.
const (
	// ConditionTargetsResolved says whether the targets of the current
	// revision could be resolved, and why there are none when there are none.
	ConditionTargetsResolved = "TargetsResolved"
	// ConditionReady is true when the current revision succeeded.
	ConditionReady = "Ready"
	// ConditionOnline is true while the device heartbeats.
	ConditionOnline = "Online"
)

// Condition reasons.
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
	// ReasonCanaryFailed: a canary failed; release is blocked.
	ReasonCanaryFailed = "CanaryFailed"
	// ReasonRolloutFailed: a target failed.
	ReasonRolloutFailed = "RolloutFailed"
)

// FinalizerDeployment lets the operator append the removal intent before a
// Deployment disappears.
const FinalizerDeployment = "fleet.nationtech.io/removal-intent"

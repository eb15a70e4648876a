// Package follow holds what the followers watch (operator/followers) tells
// the rollout runner (operator/rollouts) about a Device and a Follow
// Deployment (ADR 0026): the one type the two roles share.
package follow

// Change is what a Device now is to one Follow Deployment (ADR
// 0026), as the followers watch judged it from the informer cache: whether it
// matches the Deployment's selector and rules (not quarantined, not a
// duplicate device id, a member of an allowed group), why, and the label or
// membership change that made it so. The rollout runner decides from it
// and appends the decision (rollout.target-added, rollout.target-removed);
// the change itself is never an event.
type Change struct {
	Namespace, Deployment string
	// UID and Generation are the Deployment's when the change was judged:
	// the runner applies a change to the revision of that generation only.
	UID        string
	Generation int64
	Device     string
	// Match is whether the device is a target by the Deployment's rules.
	Match bool
	// Immediate: a departure that takes effect at once (the Device was
	// deleted or quarantined, marked DuplicateDeviceID, or is no member of
	// an allowed group); a departure by a label change waits for the
	// runner's FollowDebounce.
	Immediate bool
	// Reason and Change say why, for the transition.
	Reason, Change string
	// Labels are the Device's labels as judged (a match only): the
	// runner reads the disruption budget's label key of a revision with
	// a plan from them.
	Labels map[string]string
}

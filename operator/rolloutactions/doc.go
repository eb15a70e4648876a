// Package rolloutactions owns the operator's rollout-action role: the
// controller (RolloutActions) that turns a Deployment's rollout-action
// annotation (approve, pause, resume; ADR 0016) into one rollout
// transition on the Deployment's rollout subject, refuses stale and
// invalid requests with a Warning Event, and removes a stale annotation.
// Package operator wires it; it imports no other role.
package rolloutactions

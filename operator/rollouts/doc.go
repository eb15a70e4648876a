// Package rollouts owns the operator's rollout role: the rollout runner
// (RolloutRunner) that folds the devices' reports into each revision's
// rollout, appends the rollout transitions, writes the devices'
// fleet-intent values and the Deployment status (KubeStatus), and keeps
// its checkpoint; and the target watch (TargetWatch) that tells it of
// Devices leaving a target set. Its metrics (Metrics) read the runner's
// state. The Deployment controller that appends the revisions it folds is
// in operator/deployments, the rollout-action controller in
// operator/rolloutactions. Package operator wires it; it imports no other
// role.
package rollouts

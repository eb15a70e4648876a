// Package rollouts owns the operator's rollout role: the Deployment
// controller (DeploymentReconciler) that resolves a Deployment's targets
// (ResolveTargets) and appends its revisions, the rollout-action controller
// (RolloutActions), the target watch (TargetWatch), and the rollout runner
// (RolloutRunner) that folds the devices' reports into each revision's
// rollout, writes the devices' fleet-intent values and the Deployment
// status (KubeStatus), and keeps its checkpoint. It also holds the
// operator's Prometheus metrics (Metrics), which read the runner's state.
// Package operator wires it; of the other roles it imports policysync (the
// PullSecretPolicy condition).
package rollouts

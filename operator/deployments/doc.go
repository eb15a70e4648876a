// Package deployments owns the operator's Deployment role: the Deployment
// controller (DeploymentReconciler) that resolves a Deployment's targets
// and rollout plan (ResolveTargets), freezes each generation into one
// revision (RevisionEvents: the deployment.revision.created event and its
// target chunks) appended to the Deployment's intent subject
// (AppendRevision), writes the TargetsResolved condition, and appends the
// deletion event when the Deployment goes. Its metrics (Metrics) count the
// revisions it appends. Package operator wires it; of the other roles it
// imports policysync (the PullSecretPolicy condition a generation waits
// for).
package deployments

package operator

import (
	"context"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/deployments"
	"github.com/nationtech/harmony-fleet/operator/rolloutactions"
)

// The Deployment role lives in operator/deployments and the rollout-action
// controller in operator/rolloutactions; these names keep the root's API
// for its callers.
type (
	// DeploymentReconciler is the Deployment controller
	// (deployments.DeploymentReconciler).
	DeploymentReconciler = deployments.DeploymentReconciler
	// RolloutActions is the rollout-action controller
	// (rolloutactions.RolloutActions).
	RolloutActions = rolloutactions.RolloutActions
)

// ResolveTargets freezes the target set of a Deployment's revision
// (deployments.ResolveTargets).
func ResolveTargets(ctx context.Context, d *fleetv1.Deployment, devices []fleetv1.Device, groups GroupSource) (Resolution, error) {
	return deployments.ResolveTargets(ctx, d, devices, groups)
}

// RevisionID names a revision by generation and score digest
// (deployments.RevisionID).
func RevisionID(generation int64, scoreDigest string) string {
	return deployments.RevisionID(generation, scoreDigest)
}

// ScoreDigest is the digest of a score and its canonical JSON
// (deployments.ScoreDigest).
var ScoreDigest = deployments.ScoreDigest

// The Deployment and rollout-action roles' names (packages deployments and
// rolloutactions).
const (
	FieldOwnerRevisions = deployments.FieldOwnerRevisions
	MetricRevisions     = deployments.MetricRevisions

	EventReasonRolloutActionRecorded = rolloutactions.EventReasonRolloutActionRecorded
	EventReasonRolloutActionInvalid  = rolloutactions.EventReasonRolloutActionInvalid
	EventReasonRolloutActionStale    = rolloutactions.EventReasonRolloutActionStale
)

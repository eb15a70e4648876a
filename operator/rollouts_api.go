package operator

import (
	"context"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/rollouts"
)

// The rollout role lives in operator/rollouts; these names keep the root's
// API for its callers.
type (
	// DeploymentReconciler is the Deployment controller
	// (rollouts.DeploymentReconciler).
	DeploymentReconciler = rollouts.DeploymentReconciler
	// RolloutActions is the rollout-action controller (rollouts.RolloutActions).
	RolloutActions = rollouts.RolloutActions
	// RolloutRunner is the rollout runner (rollouts.RolloutRunner).
	RolloutRunner = rollouts.RolloutRunner
	// DeploymentStatusWriter writes the rollout runner's Deployment status
	// (rollouts.DeploymentStatusWriter).
	DeploymentStatusWriter = rollouts.DeploymentStatusWriter
	// KubeStatus is the DeploymentStatusWriter of the Kubernetes API
	// (rollouts.KubeStatus).
	KubeStatus = rollouts.KubeStatus
	// TargetRemoval is a Device leaving a target set (rollouts.TargetRemoval).
	TargetRemoval = rollouts.TargetRemoval
	// TargetWatch reports target removals to the runner (rollouts.TargetWatch).
	TargetWatch = rollouts.TargetWatch
	// Metrics are the operator's own Prometheus metrics (rollouts.Metrics).
	Metrics = rollouts.Metrics
)

// NewMetrics returns the operator's metrics at zero (rollouts.NewMetrics).
func NewMetrics() *Metrics { return rollouts.NewMetrics() }

// ProcessMetrics returns the metrics operators of this process use when
// Options.Metrics is nil (rollouts.ProcessMetrics).
func ProcessMetrics() *Metrics { return rollouts.ProcessMetrics() }

// ResolveTargets freezes the target set of a Deployment's revision
// (rollouts.ResolveTargets).
func ResolveTargets(ctx context.Context, d *fleetv1.Deployment, devices []fleetv1.Device, groups GroupSource) (Resolution, error) {
	return rollouts.ResolveTargets(ctx, d, devices, groups)
}

// RevisionID names a revision by generation and score digest
// (rollouts.RevisionID).
func RevisionID(generation int64, scoreDigest string) string {
	return rollouts.RevisionID(generation, scoreDigest)
}

// ScoreDigest is the digest of a score and its canonical JSON
// (rollouts.ScoreDigest).
var ScoreDigest = rollouts.ScoreDigest

// The rollout role's names and bounds (package rollouts).
const (
	FieldOwnerRevisions     = rollouts.FieldOwnerRevisions
	FieldOwnerRollouts      = rollouts.FieldOwnerRollouts
	CheckpointObject        = rollouts.CheckpointObject
	DefaultTargetTimeout    = rollouts.DefaultTargetTimeout
	DefaultProgressDeadline = rollouts.DefaultProgressDeadline

	EventReasonRolloutActionRecorded = rollouts.EventReasonRolloutActionRecorded
	EventReasonRolloutActionInvalid  = rollouts.EventReasonRolloutActionInvalid
	EventReasonRolloutActionStale    = rollouts.EventReasonRolloutActionStale

	MetricRevisions            = rollouts.MetricRevisions
	MetricLeader               = rollouts.MetricLeader
	MetricRolloutTransitions   = rollouts.MetricRolloutTransitions
	MetricRolloutDuration      = rollouts.MetricRolloutDuration
	MetricRolloutStarted       = rollouts.MetricRolloutStarted
	MetricRolloutDeadline      = rollouts.MetricRolloutDeadline
	MetricRollouts             = rollouts.MetricRollouts
	MetricDeploymentDegraded   = rollouts.MetricDeploymentDegraded
	MetricRunnerReports        = rollouts.MetricRunnerReports
	MetricRunnerIntentWrites   = rollouts.MetricRunnerIntentWrites
	MetricRunnerStatusWrites   = rollouts.MetricRunnerStatusWrites
	MetricRunnerLive           = rollouts.MetricRunnerLive
	MetricRunnerCheckpointAge  = rollouts.MetricRunnerCheckpointAge
	MetricDevices              = rollouts.MetricDevices
	MetricDeviceReportsTrimmed = rollouts.MetricDeviceReportsTrimmed
	MetricContainerRestarts    = rollouts.MetricContainerRestarts
)

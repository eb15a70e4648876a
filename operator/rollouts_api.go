package operator

import (
	"github.com/nationtech/harmony-fleet/operator/followers"
	"github.com/nationtech/harmony-fleet/operator/internal/follow"
	"github.com/nationtech/harmony-fleet/operator/rollouts"
)

// The rollout runner lives in operator/rollouts; these names keep the
// root's API for its callers.
type (
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
	// FollowChange is how a Device stands to a Follow Deployment
	// (follow.Change, ADR 0026).
	FollowChange = follow.Change
	// FollowWatch reports Follow changes to the runner (followers.Watch).
	FollowWatch = followers.Watch
)

// The rollout role's names and bounds (package rollouts).
const (
	FieldOwnerRollouts      = rollouts.FieldOwnerRollouts
	CheckpointObject        = rollouts.CheckpointObject
	DefaultTargetTimeout    = rollouts.DefaultTargetTimeout
	DefaultProgressDeadline = rollouts.DefaultProgressDeadline
	DefaultFollowDebounce   = rollouts.DefaultFollowDebounce

	MetricRolloutTransitions  = rollouts.MetricRolloutTransitions
	MetricRolloutDuration     = rollouts.MetricRolloutDuration
	MetricRolloutStarted      = rollouts.MetricRolloutStarted
	MetricRolloutDeadline     = rollouts.MetricRolloutDeadline
	MetricRollouts            = rollouts.MetricRollouts
	MetricDeploymentDegraded  = rollouts.MetricDeploymentDegraded
	MetricRunnerReports       = rollouts.MetricRunnerReports
	MetricRunnerIntentWrites  = rollouts.MetricRunnerIntentWrites
	MetricRunnerStatusWrites  = rollouts.MetricRunnerStatusWrites
	MetricRunnerLive          = rollouts.MetricRunnerLive
	MetricRunnerCheckpointAge = rollouts.MetricRunnerCheckpointAge
)

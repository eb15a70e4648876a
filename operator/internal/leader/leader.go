// Package leader holds what the operator's roles need of leader election:
// a runnable that runs on the elected replica only (Only). Election itself
// is configured by package operator. Imported by the roles of the operator
// only.
package leader

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Only is a runnable that runs on the elected replica only
// (manager.LeaderElectionRunnable): the runners and the telemetry consumer
// write, so they say so rather than rely on controller-runtime's default for
// runnables that do not.
type Only func(ctx context.Context) error

var _ manager.LeaderElectionRunnable = Only(nil)

// Start runs the function.
func (f Only) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection is true: only the leader runs it.
func (Only) NeedLeaderElection() bool { return true }

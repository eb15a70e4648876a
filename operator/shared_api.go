package operator

import (
	"context"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/intent"
	"github.com/nationtech/harmony-fleet/operator/internal/targets"
)

// The event store, the reader and the target rule the roles share live in
// operator/internal; these names keep the root's API for its callers.
type (
	// EventStore is what the controllers need of the event store
	// (intent.Store).
	EventStore = intent.Store
	// EventReader is what the operator needs to read events (intent.Reader).
	EventReader = intent.Reader
	// Resolution is the frozen target set of a revision and why
	// (targets.Resolution).
	Resolution = targets.Resolution
	// GroupSource says which device groups a device is in
	// (targets.GroupSource).
	GroupSource = targets.GroupSource
	// StaticGroups is a GroupSource from a fixed table (targets.StaticGroups).
	StaticGroups = targets.StaticGroups
	// GroupFile is the file LoadGroupFile reads (targets.GroupFile).
	GroupFile = targets.GroupFile
	// GroupFileWatch reads a group file again as it changes
	// (targets.GroupFileWatch).
	GroupFileWatch = targets.GroupFileWatch
)

// NewStaticGroups returns a StaticGroups of namespaces (targets.NewStaticGroups).
func NewStaticGroups(namespaces map[string]map[string][]string) *StaticGroups {
	return targets.NewStaticGroups(namespaces)
}

// LoadGroupFile reads a group file (targets.LoadGroupFile).
func LoadGroupFile(path string) (*StaticGroups, error) { return targets.LoadGroupFile(path) }

// ResolveTaskRunTargets applies the rules of ResolveTargets to a TaskRun
// (targets.ResolveTaskRun). A TaskRun has no canary stage: Canaries is
// always empty.
func ResolveTaskRunTargets(ctx context.Context, tr *fleetv1.TaskRun, devices []fleetv1.Device, groups GroupSource) (Resolution, error) {
	return targets.ResolveTaskRun(ctx, tr, devices, groups)
}

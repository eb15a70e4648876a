package fleetview

import (
	"context"
	"time"
)

// Source is what the dashboard's HTTP layer reads. [NewLive] and [Mock]
// implement it. Every method is safe for concurrent use; none blocks on the
// API server (reads are from the informer cache and the streams).
type Source interface {
	// Overview is the fleet overview page: devices online / stale /
	// offline, Deployments by phase, TaskRuns by phase, open alerts.
	Overview(ctx context.Context) (Overview, error)
	// Devices is one page of the device list: filtered by a label selector,
	// a liveness and a search text, sorted by device id. An invalid query is
	// ErrInvalidQuery naming the field.
	Devices(ctx context.Context, q DeviceQuery) (DevicePage, error)
	// Device is a device's page: inventory, labels, every Deployment it
	// runs with revision and state, its recent timeline. ErrNotFound when no
	// Device of that id is in the cache.
	Device(ctx context.Context, id string) (DeviceDetail, error)
	// Deployments is the Deployment list, sorted by namespace and name.
	Deployments(ctx context.Context) ([]DeploymentSummary, error)
	// Deployment is a Deployment's page: the aggregate of its targets, the
	// latest failure, per-device rollout state, the canary stage, the
	// revision history and its recent timeline. ErrNotFound when neither
	// the cache nor the streams know it.
	Deployment(ctx context.Context, namespace, name string) (DeploymentDetail, error)
	// FleetAt is the fleet as it was at a past time (desired versus
	// reported per device, every Deployment's rollout state), folded from
	// the streams by the history package.
	FleetAt(ctx context.Context, at time.Time) (FleetAt, error)
	// TaskRuns is the TaskRun list, sorted by namespace and name.
	TaskRuns(ctx context.Context) ([]TaskRunSummary, error)
	// TaskRun is a TaskRun's page with every target's result, read-only.
	TaskRun(ctx context.Context, namespace, name string) (TaskRunDetail, error)
	// Alerts are the alerts derived from the current state, sorted by
	// severity then since. An alert's ID is stable while its cause lasts.
	Alerts(ctx context.Context) ([]Alert, error)
	// Trend is the 24-hour trend: heartbeats, reports and failures per
	// hour.
	Trend(ctx context.Context) (Trend, error)
	// Changes returns a channel of coalesced changes (at most
	// Options.MaxChangeRate a second) saying which pages to refresh. It is
	// closed when ctx ends. A slow reader misses nothing: pending changes
	// merge into the next one.
	Changes(ctx context.Context) <-chan Change
}

var _ Source = (*View)(nil)

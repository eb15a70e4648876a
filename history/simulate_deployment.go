package history

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections/rolloutplan"
)

// filterInventory is every device's inventory reports (stream
// FLEET_TELEMETRY).
const filterInventory = "fleet.report.*.inventory"

// SimulateDeployment predicts the rollout of d as if it were applied at
// o.Start (default: to): its targets are the devices whose labels, as
// their last inventory report up to to says, match its selector (minus
// quarantined ones), its canaries those labelled canary=true, and its plan
// is resolved against them by the operator's own rolloutplan.Resolve
// (ADR 0016); the devices' behaviour is learned from the history between
// from and to. A maintenance window (spec.rollout.maintenanceWindow) is
// frozen into the revision and modelled, read in each target's last
// reported time zone (UTC when none); prefetch and the fetch window
// (spec.rollout.prefetch, fetchWindow) are frozen and modelled from the
// recorded fetch reports. The errors name the field of d to fix.
func (h *History) SimulateDeployment(ctx context.Context, d *fleetv1.Deployment, from, to time.Time, o SimulateOptions) (*Prediction, error) {
	if d.Namespace == "" || d.Name == "" {
		return nil, fmt.Errorf("%w: metadata.namespace and metadata.name: set both (the simulated revision is one of namespace/name)", ErrInvalidOptions)
	}
	if len(d.Spec.AllowedGroups) > 0 {
		return nil, fmt.Errorf("%w: spec.allowedGroups: the streams hold no group membership, so targets cannot be resolved from them: remove it to simulate against every matching device", ErrInvalidOptions)
	}
	// The windows the revision would freeze (ADR 0029), checked as the
	// operator checks them.
	var window, fetchWindow *events.MaintenanceWindow
	if w := d.Spec.Rollout.MaintenanceWindow; w != nil {
		window = &events.MaintenanceWindow{Start: w.Start, Duration: w.Duration}
		if err := window.Validate(); err != nil {
			return nil, fmt.Errorf("%w: spec.rollout.maintenanceWindow: %w", ErrInvalidOptions, err)
		}
	}
	if w := d.Spec.Rollout.FetchWindow; w != nil {
		if !d.Spec.Rollout.Prefetch {
			return nil, fmt.Errorf("%w: spec.rollout.fetchWindow needs spec.rollout.prefetch: true (without prefetch a device pulls the images when it switches, inside spec.rollout.maintenanceWindow): set prefetch, or remove fetchWindow", ErrInvalidOptions)
		}
		fetchWindow = &events.MaintenanceWindow{Start: w.Start, Duration: w.Duration}
		if err := fetchWindow.Validate(); err != nil {
			return nil, fmt.Errorf("%w: spec.rollout.fetchWindow: %w", ErrInvalidOptions, err)
		}
	}
	labels, err := h.inventoryLabels(ctx, to)
	if err != nil {
		return nil, err
	}
	var targets, canaries []string
	for _, dev := range slices.Sorted(maps.Keys(labels)) {
		l := labels[dev]
		if _, q := l[fleetv1.LabelBlacklist]; q || !matchLabels(d.Spec.TargetSelector.MatchLabels, l) {
			continue
		}
		targets = append(targets, dev)
		if l[fleetv1.LabelCanary] == "true" {
			canaries = append(canaries, dev)
		}
	}
	if len(targets) == 0 {
		return nil, fmt.Errorf("%w: spec.targetSelector matches no device of the %d whose inventory the streams hold", ErrNoEvents, len(labels))
	}
	sc, err := json.Marshal(d.Spec.Score)
	if err != nil {
		return nil, fmt.Errorf("simulate: spec.score: %w", err)
	}
	gen := max(d.Generation, 1)
	rev := events.DeploymentRevisionCreated{UID: "simulated", Generation: gen, RevisionID: fmt.Sprintf("%d-simulated", gen),
		Score: sc, Targets: targets, Canaries: canaries, Window: window, Prefetch: d.Spec.Rollout.Prefetch, FetchWindow: fetchWindow}
	if pd := d.Spec.Rollout.ProgressDeadline; pd != nil {
		rev.ProgressDeadlineSeconds = int64(pd.Duration / time.Second)
	}
	if mr := d.Spec.Rollout.MinReady; mr != nil {
		rev.MinReadySeconds = int64(mr.Duration / time.Second)
	}
	// The operator's own resolution; its errors name the field under
	// spec.
	res, err := rolloutplan.Resolve(d.Spec.Rollout, targets, canaries, func(dev string) map[string]string { return labels[dev] })
	if err != nil {
		return nil, fmt.Errorf("%w: spec.%w", ErrInvalidOptions, err)
	}
	rev.Plan, rev.TargetBatches, rev.TargetGroups = res.Plan, res.Batches, res.Groups
	return h.Simulate(ctx, d.Namespace, d.Name, rev, from, to, o)
}

// inventoryLabels is every device's labels as its last inventory report
// stored up to until says.
func (h *History) inventoryLabels(ctx context.Context, until time.Time) (map[string]map[string]string, error) {
	recs, err := h.collect(ctx, until, read{filter: filterInventory, from: events.FromStart()})
	if err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, rec := range recs {
		inv, err := events.Decode[events.DeviceInventory](rec.Event)
		if err != nil {
			h.skipData(ctx, rec, err)
			continue
		}
		out[rec.Event.Keys.Device] = inv.Labels
	}
	return out, nil
}

func matchLabels(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

package deployments

import (
	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections/rolloutplan"
)

// planResolution is a rollout plan frozen against a revision's targets.
type planResolution struct {
	// plan is nil when the rollout sets none of the ADR 0016 controls.
	plan *events.RolloutPlan
	// batches has one entry per target, aligned with the targets: 0 for
	// a canary, k for plan.Batches[k-1].
	batches []int
	// dropped describes the spec's batches that resolved to no device.
	dropped []string
	// groups has one entry per target with a disruption budget: the index
	// of the target's label value in plan.Budget.Values.
	groups []int
	// selectors has one entry per plan batch: its matchLabels, nil but
	// for a selector batch.
	selectors []map[string]string
	// emptySelectors are the dropped selector batches and the plan batch
	// that took each one's place (rolloutplan.Resolution.EmptySelectors).
	emptySelectors []events.EmptySelectorBatch
}

// hasPlan reports whether a rollout asks for a plan (rolloutplan.Wanted).
func hasPlan(spec fleetv1.RolloutSpec) bool { return rolloutplan.Wanted(spec) }

// resolvePlan freezes a rollout's plan (ADR 0016) against the frozen
// targets (sorted device ids) and canaries (a sorted subset): it is
// rolloutplan.Resolve, the one definition `fleet rollout simulate` uses
// too. The errors name the field: the CRD refuses such a spec, so they
// come only from a spec that bypassed it.
func resolvePlan(spec fleetv1.RolloutSpec, targets, canaries []string, labels func(device string) map[string]string) (planResolution, error) {
	res, err := rolloutplan.Resolve(spec, targets, canaries, labels)
	if err != nil {
		return planResolution{}, err
	}
	return planResolution{plan: res.Plan, batches: res.Batches, dropped: res.Dropped, groups: res.Groups, selectors: res.Selectors, emptySelectors: res.EmptySelectors}, nil
}

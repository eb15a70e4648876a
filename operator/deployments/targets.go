package deployments

import (
	"context"
	"fmt"
	"strings"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/targets"
)

// ResolveTargets applies the rollout semantics: targets are the devices whose
// labels match the selector, minus quarantined ones (label blacklist) and
// minus Devices marked DuplicateDeviceID (another namespace's Device owns
// that device id), and, when allowedGroups is set, only members of one of
// those groups according to groups. When allowedGroups is set and groups is
// nil, no device matches (fail closed). Canaries are the targets labelled
// canary=true. When the rollout sets batches, manual approval or a pause on
// failure, the plan is resolved against the frozen targets and their labels
// (resolvePlan); the message says how many batches it has and which of the
// spec's batches resolved to no device and were dropped.
func ResolveTargets(ctx context.Context, d *fleetv1.Deployment, devices []fleetv1.Device, groups targets.GroupSource) (targets.Resolution, error) {
	r, ex, err := targets.Resolve(ctx, d.Spec.TargetSelector, d.Spec.AllowedGroups, devices, groups)
	if err != nil {
		return r, err
	}
	var p planResolution
	if hasPlan(d.Spec.Rollout) {
		labels := make(map[string]map[string]string, len(devices))
		for i := range devices {
			labels[devices[i].Name] = devices[i].Labels
		}
		p, err = resolvePlan(d.Spec.Rollout, r.Targets, r.Canaries, func(device string) map[string]string { return labels[device] })
		if err != nil {
			return targets.Resolution{}, fmt.Errorf("deployment %s/%s: %w", d.Namespace, d.Name, err)
		}
		if p.plan != nil && d.Spec.Rollout.Targets == fleetv1.RolloutTargetsFollow {
			// A follower joins the first selector batch its labels
			// match (ADR 0026): a Follow revision keeps the selectors,
			// a Frozen one keeps its bytes of before.
			for i, sel := range p.selectors {
				p.plan.Batches[i].Selector = sel
			}
			// And one matching only a selector batch empty at the
			// freeze joins the batch that took its place.
			p.plan.EmptySelectors = p.emptySelectors
		}
		r.Plan, r.TargetBatches, r.TargetGroups = p.plan, p.batches, p.groups
	}
	if r.Reason != fleetv1.ReasonResolved {
		return r, nil
	}
	r.Message = fmt.Sprintf("%d targets, %d canaries, %d quarantined excluded", len(r.Targets), len(r.Canaries), ex.Quarantined)
	if ex.Duplicates > 0 {
		r.Message += fmt.Sprintf(", %d duplicate device ids excluded", ex.Duplicates)
	}
	if p.plan != nil {
		r.Message += fmt.Sprintf("; a plan of %d batches", len(p.plan.Batches))
		if len(p.dropped) > 0 {
			r.Message += "; dropped, resolving to no device: " + strings.Join(p.dropped, ", ")
		}
	}
	return r, nil
}

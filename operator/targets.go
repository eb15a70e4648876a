package operator

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Resolution is the frozen target set of a revision and why it is what it is.
type Resolution struct {
	// Targets and Canaries are sorted device ids; Canaries ⊆ Targets.
	Targets  []string
	Canaries []string
	// Plan is the frozen rollout plan (ADR 0016), nil when the rollout
	// sets none of its controls; TargetBatches then has one entry per
	// Targets entry, in the same order: 0 for a canary, k for
	// Plan.Batches[k-1].
	Plan          *events.RolloutPlan
	TargetBatches []int
	// TargetGroups has one entry per Targets entry when the plan has a
	// disruption budget: the index of the target's group in
	// Plan.Budget.Values.
	TargetGroups []int
	// Reason and Message explain the result for the TargetsResolved
	// condition.
	Reason  string
	Message string
}

const noGroupSourceMessage = "allowedGroups is set but the operator has no group source, so no device matches (fail closed); configure a group source or remove allowedGroups"

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
func ResolveTargets(ctx context.Context, d *fleetv1.Deployment, devices []fleetv1.Device, groups GroupSource) (Resolution, error) {
	r, ex, err := resolve(ctx, d.Spec.TargetSelector, d.Spec.AllowedGroups, devices, groups)
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
			return Resolution{}, fmt.Errorf("deployment %s/%s: %w", d.Namespace, d.Name, err)
		}
		r.Plan, r.TargetBatches, r.TargetGroups = p.plan, p.batches, p.groups
	}
	if r.Reason != fleetv1.ReasonResolved {
		return r, nil
	}
	r.Message = fmt.Sprintf("%d targets, %d canaries, %d quarantined excluded", len(r.Targets), len(r.Canaries), ex.quarantined)
	if ex.duplicates > 0 {
		r.Message += fmt.Sprintf(", %d duplicate device ids excluded", ex.duplicates)
	}
	if p.plan != nil {
		r.Message += fmt.Sprintf("; a plan of %d batches", len(p.plan.Batches))
		if len(p.dropped) > 0 {
			r.Message += "; dropped, resolving to no device: " + strings.Join(p.dropped, ", ")
		}
	}
	return r, nil
}

// ResolveTaskRunTargets applies the rules of ResolveTargets to a TaskRun. A
// TaskRun has no canary stage: Canaries is always empty.
func ResolveTaskRunTargets(ctx context.Context, tr *fleetv1.TaskRun, devices []fleetv1.Device, groups GroupSource) (Resolution, error) {
	r, ex, err := resolve(ctx, tr.Spec.TargetSelector, tr.Spec.AllowedGroups, devices, groups)
	if err != nil {
		return r, err
	}
	r.Canaries = nil
	if r.Reason == fleetv1.ReasonResolved {
		r.Message = fmt.Sprintf("%d targets, %d quarantined excluded", len(r.Targets), ex.quarantined)
		if ex.duplicates > 0 {
			r.Message += fmt.Sprintf(", %d duplicate device ids excluded", ex.duplicates)
		}
	}
	return r, nil
}

// excluded counts the matching devices resolve left out.
type excluded struct{ quarantined, duplicates int }

// resolve is the target rule shared by Deployments and TaskRuns; the
// caller words the message of a resolution with targets.
func resolve(ctx context.Context, selector fleetv1.TargetSelector, allowedGroups []string, devices []fleetv1.Device, groups GroupSource) (Resolution, excluded, error) {
	if len(allowedGroups) > 0 && groups == nil {
		return Resolution{Reason: fleetv1.ReasonNoGroupSource, Message: noGroupSourceMessage}, excluded{}, nil
	}
	var r Resolution
	var ex excluded
	for i := range devices {
		dev := &devices[i]
		if !dev.DeletionTimestamp.IsZero() || !matches(selector.MatchLabels, dev.Labels) {
			continue
		}
		if _, q := dev.Labels[fleetv1.LabelBlacklist]; q {
			ex.quarantined++
			continue
		}
		if duplicateID(dev) {
			ex.duplicates++
			continue
		}
		if len(allowedGroups) > 0 {
			gs, err := groups.Groups(ctx, dev.Namespace, dev.Name)
			if err != nil {
				return Resolution{}, ex, fmt.Errorf("groups of device %s/%s: %w", dev.Namespace, dev.Name, err)
			}
			if !slices.ContainsFunc(gs, func(g string) bool { return slices.Contains(allowedGroups, g) }) {
				continue
			}
		}
		r.Targets = append(r.Targets, dev.Name)
		if dev.Labels[fleetv1.LabelCanary] == "true" {
			r.Canaries = append(r.Canaries, dev.Name)
		}
	}
	slices.Sort(r.Targets)
	slices.Sort(r.Canaries)
	if len(r.Targets) == 0 {
		r.Reason = fleetv1.ReasonNoMatchingDevices
		r.Message = fmt.Sprintf("no eligible device matches the selector (%d quarantined, %d duplicate device ids)", ex.quarantined, ex.duplicates)
		return r, ex, nil
	}
	r.Reason = fleetv1.ReasonResolved
	return r, ex, nil
}

// duplicateID reports whether the Device controller marked dev as a
// duplicate device id (Online condition, reason DuplicateDeviceID).
func duplicateID(dev *fleetv1.Device) bool {
	c := meta.FindStatusCondition(dev.Status.Conditions, fleetv1.ConditionOnline)
	return c != nil && c.Reason == fleetv1.ReasonDuplicateDeviceID
}

func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

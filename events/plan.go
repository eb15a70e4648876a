package events

import "fmt"

// CheckPlan reports whether a complete (assembled) revision's plan and
// TargetBatches agree. Without a plan, TargetBatches must be empty. With
// one, TargetBatches has one entry per Targets entry: 0 for exactly the
// canaries, k in 1..len(Plan.Batches) for the others, and batch k has as
// many entries as its Size; every SuccessPercent is in 1..100 and no
// SoakSeconds is negative. The error wraps ErrPlanMisaligned and says what
// differs.
func (d DeploymentRevisionCreated) CheckPlan() error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%w: revision %s (generation %d): %s", ErrPlanMisaligned, d.RevisionID, d.Generation, fmt.Sprintf(format, args...))
	}
	if d.Plan == nil {
		if len(d.TargetBatches) > 0 {
			return fail("%d targetBatches entries without a plan", len(d.TargetBatches))
		}
		return nil
	}
	if len(d.TargetBatches) != len(d.Targets) {
		return fail("%d targetBatches entries for %d targets (one per target, in the same order)", len(d.TargetBatches), len(d.Targets))
	}
	for i, b := range d.Plan.Batches {
		if b.SuccessPercent < 1 || b.SuccessPercent > 100 {
			return fail("plan batch %d has successPercent %d, outside 1..100", i+1, b.SuccessPercent)
		}
		if b.SoakSeconds < 0 {
			return fail("plan batch %d has a negative soakSeconds", i+1)
		}
	}
	canary := make(map[string]bool, len(d.Canaries))
	for _, c := range d.Canaries {
		canary[c] = true
	}
	sizes := make([]int, len(d.Plan.Batches)+1)
	for i, k := range d.TargetBatches {
		switch {
		case k < 0 || k > len(d.Plan.Batches):
			return fail("target %q is in batch %d, the plan has %d", d.Targets[i], k, len(d.Plan.Batches))
		case canary[d.Targets[i]] && k != 0:
			return fail("canary %q is in batch %d, want 0", d.Targets[i], k)
		case !canary[d.Targets[i]] && k == 0:
			return fail("target %q is not a canary but in batch 0", d.Targets[i])
		}
		sizes[k]++
	}
	for i, b := range d.Plan.Batches {
		if sizes[i+1] != b.Size {
			return fail("plan batch %d has size %d, %d targets are in it", i+1, b.Size, sizes[i+1])
		}
	}
	return d.checkBudget(fail)
}

// checkBudget checks a plan's disruption budget against TargetGroups.
func (d DeploymentRevisionCreated) checkBudget(fail func(format string, args ...any) error) error {
	b := d.Plan.Budget
	if b == nil {
		if len(d.TargetGroups) > 0 {
			return fail("%d targetGroups entries without a disruption budget", len(d.TargetGroups))
		}
		return nil
	}
	if b.LabelKey == "" {
		return fail("the disruption budget has no labelKey")
	}
	if (b.MaxUnavailable > 0) == (b.MaxPercent > 0) || b.MaxUnavailable < 0 || b.MaxPercent < 0 || b.MaxPercent > 100 {
		return fail("the disruption budget sets maxUnavailable %d and maxPercent %d: exactly one, positive, a percentage at most 100", b.MaxUnavailable, b.MaxPercent)
	}
	if len(d.TargetGroups) != len(d.Targets) {
		return fail("%d targetGroups entries for %d targets (one per target, in the same order)", len(d.TargetGroups), len(d.Targets))
	}
	for i, g := range d.TargetGroups {
		if g < 0 || g > len(b.Values) {
			return fail("target %q is in group %d, the budget has %d values and the group of targets without the label", d.Targets[i], g, len(b.Values))
		}
	}
	return nil
}

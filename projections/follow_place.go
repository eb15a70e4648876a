package projections

import (
	"slices"

	"github.com/nationtech/harmony-fleet/events"
)

// PlaceFollower places a follower of a revision with a plan (ADR 0016,
// ADR 0026) where the freeze would have placed it: in the first batch
// whose frozen selector its labels (the Device's, as judged) all match,
// a selector batch empty at the freeze (Plan.EmptySelectors) standing
// for the batch that took its place, else in the plan's last batch (the
// leftovers of a count or percent plan). It waits for its batch and that batch's approval, and counts in
// its threshold, never handed the revision earlier than planned. With a
// disruption budget, its group is its value of the budget's label key (a
// value the plan does not know being a group of its own), and the
// budget's waves hand it the revision, also when its batch ended already;
// without one, a follower whose batch started already is handed it at
// once (Released). The event carries the writer's choice, so the fold
// stays a fold. Without a plan, d is unchanged.
func (r Rollout) PlaceFollower(d events.RolloutTransition, labels map[string]string) events.RolloutTransition {
	if !r.planned() {
		return d
	}
	d.Batch = followBatch(r.Plan, labels)
	switch {
	case r.Plan.Budget != nil:
		d.BudgetGroup = labels[r.Plan.Budget.LabelKey]
	case r.Batch >= d.Batch:
		d.Released = []string{d.Device}
	}
	return d
}

// followBatch is the plan batch (1-based) of a follower with labels: the
// first batch, in the spec's order, whose selector they match, a selector
// batch empty at the freeze standing for the batch that took its place;
// else the last batch.
func followBatch(plan *events.RolloutPlan, labels map[string]string) int {
	empty := plan.EmptySelectors
	for i, b := range plan.Batches {
		for ; len(empty) > 0 && empty[0].Before <= i+1; empty = empty[1:] {
			if selects(empty[0].Selector, labels) {
				return i + 1
			}
		}
		if len(b.Selector) > 0 && selects(b.Selector, labels) {
			return i + 1
		}
	}
	return len(plan.Batches)
}

// selects reports whether labels has every label of selector.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// ReasonFailedBeforeHanded is the reason of the rollout.target-added that
// hands a follower the Deployment's last revision that succeeded when the
// revision it joined failed before handing it the revision (ADR 0026).
const ReasonFailedBeforeHanded = "the rollout failed before handing it the revision"

// UnhandedFollowers lists, sorted, the followers of a Follow revision
// whose rollout failed that were never handed it (their batch, the
// release or a budget wave had not come): the runner hands each the last
// revision that succeeded (a rollout.target-added with HandedGeneration,
// which addHanded folds). None while the rollout runs, after a success,
// or without a revision that succeeded.
func (r Rollout) UnhandedFollowers() []string {
	if !r.Follow || r.Deleted || r.Stage != StageFailed || r.LastSucceeded == 0 {
		return nil
	}
	var out []string
	for _, f := range r.Followers {
		if f.HandedGeneration == 0 && r.IsTarget(f.Device) && r.handedAt(f.Device).IsZero() {
			out = append(out, f.Device)
		}
	}
	slices.Sort(out)
	return out
}

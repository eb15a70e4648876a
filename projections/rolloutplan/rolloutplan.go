package rolloutplan

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// MaxSoak bounds a batch's soak, as the CRD does.
const MaxSoak = 24 * time.Hour

// Resolution is a rollout plan frozen against a revision's targets.
type Resolution struct {
	// Plan is nil when the rollout sets none of the ADR 0016 controls.
	Plan *events.RolloutPlan
	// Batches has one entry per target, aligned with the targets: 0 for
	// a canary, k for Plan.Batches[k-1].
	Batches []int
	// Dropped describes the spec's batches that resolved to no device
	// ("rollout.batches[2] (selector site=moon)").
	Dropped []string
	// Groups has one entry per target with a disruption budget: the index
	// of the target's label value in Plan.Budget.Values (len(Values) for a
	// target without the label).
	Groups []int
	// Selectors has one entry per Plan.Batches entry: the spec batch's
	// matchLabels for a selector batch, nil for a count or percent batch
	// and the leftovers. A Follow revision freezes them (ADR 0026).
	Selectors []map[string]string
	// EmptySelectors are the dropped selector batches, each with the plan
	// batch that took its place, in the spec's order. A Follow revision
	// freezes them (ADR 0026).
	EmptySelectors []events.EmptySelectorBatch
}

// Wanted reports whether a rollout asks for a plan: batches, a disruption
// budget, or an approval or failure policy other than the default.
func Wanted(spec fleetv1.RolloutSpec) bool {
	return len(spec.Batches) > 0 || spec.DisruptionBudget != nil ||
		(spec.Approval != "" && spec.Approval != fleetv1.RolloutApprovalAutomatic) ||
		(spec.OnFailure != "" && spec.OnFailure != fleetv1.RolloutOnFailureFail)
}

// Resolve freezes a rollout's plan (ADR 0016) against the frozen targets
// (sorted device ids) and canaries (a sorted subset); labels gives a
// target's labels, for selector batches and the disruption budget.
// Canaries are in no batch. Selector batches claim their non-canary
// targets first, in list order (a target two selectors match is the first
// one's); count and percent batches then take the next unclaimed
// non-canary targets in device-id order, in list order, a percent being of
// all frozen targets, rounded up, at least 1. A batch left with no device
// is dropped. The targets no batch took form one last batch (100 %, no
// soak). Without any control set (or only their defaults) there is no
// plan, and the revision is as before. The errors name the field under
// spec (rollout.batches[1]…): the CRD refuses such a spec, so they come
// only from a spec that bypassed it.
func Resolve(spec fleetv1.RolloutSpec, targets, canaries []string, labels func(device string) map[string]string) (Resolution, error) {
	if !Wanted(spec) {
		return Resolution{}, nil
	}
	plan := &events.RolloutPlan{Batches: []events.PlanBatch{}}
	switch spec.Approval {
	case "", fleetv1.RolloutApprovalAutomatic:
	case fleetv1.RolloutApprovalManual:
		plan.Approval = events.ApprovalManual
	default:
		return Resolution{}, fmt.Errorf("rollout.approval %q: use Automatic or Manual", spec.Approval)
	}
	switch spec.OnFailure {
	case "", fleetv1.RolloutOnFailureFail:
	case fleetv1.RolloutOnFailurePause:
		plan.OnFailure = events.OnFailurePause
	case fleetv1.RolloutOnFailureRollback:
		plan.OnFailure = events.OnFailureRollback
	default:
		return Resolution{}, fmt.Errorf("rollout.onFailure %q: use Fail, Pause or Rollback", spec.OnFailure)
	}
	if len(spec.Batches) > fleetv1.MaxRolloutBatches {
		return Resolution{}, fmt.Errorf("rollout.batches has %d batches: list at most %d", len(spec.Batches), fleetv1.MaxRolloutBatches)
	}
	frozen := make([]events.PlanBatch, len(spec.Batches))
	for i, b := range spec.Batches {
		pb, err := planBatch(i, b)
		if err != nil {
			return Resolution{}, err
		}
		frozen[i] = pb
	}

	// of[j] is the spec batch (1-based) target j is in; -1 for a canary,
	// 0 for none yet.
	of := make([]int, len(targets))
	for j, t := range targets {
		if _, ok := slices.BinarySearch(canaries, t); ok {
			of[j] = -1
		}
	}
	for i, b := range spec.Batches {
		if b.Selector == nil {
			continue
		}
		for j, t := range targets {
			if of[j] == 0 && matches(b.Selector.MatchLabels, labels(t)) {
				of[j] = i + 1
			}
		}
	}
	next := 0 // the next target a count or percent batch may take
	for i, b := range spec.Batches {
		want := 0
		switch {
		case b.Count != nil:
			want = int(*b.Count)
		case b.Percent != nil:
			want = max(1, (int(*b.Percent)*len(targets)+99)/100)
		default:
			continue
		}
		for ; want > 0 && next < len(targets); next++ {
			if of[next] == 0 {
				of[next] = i + 1
				want--
			}
		}
	}

	for j := range of {
		if of[j] > 0 {
			frozen[of[j]-1].Size++
		}
	}
	var res Resolution
	index := make([]int, len(spec.Batches)+1) // spec batch → plan batch
	placed := 0                               // the EmptySelectors whose Before is set
	for i, pb := range frozen {
		if pb.Size == 0 {
			res.Dropped = append(res.Dropped, fmt.Sprintf("rollout.batches[%d] (%s)", i, describeBatch(spec.Batches[i])))
			if b := spec.Batches[i]; b.Selector != nil {
				res.EmptySelectors = append(res.EmptySelectors, events.EmptySelectorBatch{Selector: maps.Clone(b.Selector.MatchLabels)})
			}
			continue
		}
		plan.Batches = append(plan.Batches, pb)
		index[i+1] = len(plan.Batches)
		for ; placed < len(res.EmptySelectors); placed++ {
			res.EmptySelectors[placed].Before = len(plan.Batches)
		}
		var sel map[string]string
		if b := spec.Batches[i]; b.Selector != nil {
			sel = maps.Clone(b.Selector.MatchLabels)
		}
		res.Selectors = append(res.Selectors, sel)
	}
	for ; placed < len(res.EmptySelectors); placed++ {
		// After every kept batch: the leftovers' place, or none.
		res.EmptySelectors[placed].Before = len(plan.Batches) + 1
	}
	res.Batches = make([]int, len(targets))
	leftover := 0
	for j, k := range of {
		switch {
		case k > 0:
			res.Batches[j] = index[k]
		case k == 0:
			leftover++
			res.Batches[j] = len(plan.Batches) + 1
		}
	}
	if leftover > 0 {
		plan.Batches = append(plan.Batches, events.PlanBatch{Size: leftover, SuccessPercent: 100})
		res.Selectors = append(res.Selectors, nil)
	}
	if b := spec.DisruptionBudget; b != nil {
		budget, groups, err := resolveBudget(*b, targets, labels)
		if err != nil {
			return Resolution{}, err
		}
		plan.Budget, res.Groups = budget, groups
	}
	res.Plan = plan
	return res, nil
}

// matches reports whether labels has every label of selector.
func matches(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// resolveBudget freezes a disruption budget: the label values of the
// targets (sorted) and each target's group, the targets without the label
// being the group after the last value.
func resolveBudget(b fleetv1.DisruptionBudget, targets []string, labels func(device string) map[string]string) (*events.DisruptionBudget, []int, error) {
	if errs := validation.IsQualifiedName(b.LabelKey); len(errs) > 0 {
		return nil, nil, fmt.Errorf("rollout.disruptionBudget.labelKey %q: %s", b.LabelKey, strings.Join(errs, "; "))
	}
	out := &events.DisruptionBudget{LabelKey: b.LabelKey, Values: []string{}}
	switch mu := b.MaxUnavailable; {
	case mu.Type == intstr.Int && mu.IntVal >= 1:
		out.MaxUnavailable = int(mu.IntVal)
	case mu.Type == intstr.String && strings.HasSuffix(mu.StrVal, "%"):
		pct, err := strconv.Atoi(strings.TrimSuffix(mu.StrVal, "%"))
		if err != nil || pct < 1 || pct > 100 {
			return nil, nil, fmt.Errorf("rollout.disruptionBudget.maxUnavailable %q: use a count of at least 1 or a percentage from 1%% to 100%%", mu.String())
		}
		out.MaxPercent = pct
	default:
		return nil, nil, fmt.Errorf("rollout.disruptionBudget.maxUnavailable %q: use a count of at least 1 or a percentage from 1%% to 100%%", mu.String())
	}
	values := map[string]bool{}
	for _, t := range targets {
		if v, ok := labels(t)[b.LabelKey]; ok {
			values[v] = true
		}
	}
	out.Values = slices.Sorted(maps.Keys(values))
	groups := make([]int, len(targets))
	for i, t := range targets {
		v, ok := labels(t)[b.LabelKey]
		if !ok {
			groups[i] = len(out.Values)
			continue
		}
		groups[i], _ = slices.BinarySearch(out.Values, v)
	}
	return out, groups, nil
}

// planBatch checks one spec batch and freezes its threshold and soak; the
// size comes from the resolution.
func planBatch(i int, b fleetv1.RolloutBatch) (events.PlanBatch, error) {
	set := 0
	for _, ok := range []bool{b.Count != nil, b.Percent != nil, b.Selector != nil} {
		if ok {
			set++
		}
	}
	switch {
	case set != 1:
		return events.PlanBatch{}, fmt.Errorf("rollout.batches[%d]: set exactly one of count, percent and selector", i)
	case b.Count != nil && *b.Count < 1:
		return events.PlanBatch{}, fmt.Errorf("rollout.batches[%d].count %d: use at least 1", i, *b.Count)
	case b.Percent != nil && (*b.Percent < 1 || *b.Percent > 100):
		return events.PlanBatch{}, fmt.Errorf("rollout.batches[%d].percent %d: use 1..100", i, *b.Percent)
	case b.Selector != nil && len(b.Selector.MatchLabels) == 0:
		return events.PlanBatch{}, fmt.Errorf("rollout.batches[%d].selector.matchLabels is empty: name at least one label, or use count or percent", i)
	case b.SuccessThreshold < 0 || b.SuccessThreshold > 100:
		return events.PlanBatch{}, fmt.Errorf("rollout.batches[%d].successThreshold %d: use 1..100", i, b.SuccessThreshold)
	}
	pb := events.PlanBatch{SuccessPercent: int(b.SuccessThreshold)}
	if pb.SuccessPercent == 0 {
		pb.SuccessPercent = 100 // the default, when the API server did not set it
	}
	if b.Soak != "" {
		d, err := time.ParseDuration(b.Soak)
		if err != nil || d < 0 || d > MaxSoak {
			return events.PlanBatch{}, fmt.Errorf("rollout.batches[%d].soak %q: use hours, minutes and seconds up to 24h, e.g. 90s, 5m or 1h30m", i, b.Soak)
		}
		pb.SoakSeconds = int64(d / time.Second)
	}
	return pb, nil
}

// maxDescribed bounds a selector's description, so that the message of
// the most batches stays well within a condition's message.
const maxDescribed = 80

// describeBatch names a spec batch for Resolution.Dropped.
func describeBatch(b fleetv1.RolloutBatch) string {
	switch {
	case b.Count != nil:
		return fmt.Sprintf("count %d", *b.Count)
	case b.Percent != nil:
		return fmt.Sprintf("percent %d", *b.Percent)
	case b.Selector != nil:
		pairs := make([]string, 0, len(b.Selector.MatchLabels))
		for _, k := range slices.Sorted(maps.Keys(b.Selector.MatchLabels)) {
			pairs = append(pairs, k+"="+b.Selector.MatchLabels[k])
		}
		sel := strings.Join(pairs, ",")
		if len(sel) > maxDescribed {
			sel = sel[:maxDescribed] + "…"
		}
		return "selector " + sel
	}
	return "empty"
}

package history

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// filterInventory is every device's inventory reports (stream
// FLEET_TELEMETRY).
const filterInventory = "fleet.report.*.inventory"

// SimulateDeployment predicts the rollout of d as if it were applied at
// o.Start (default: to): its targets are the devices whose labels, as
// their last inventory report up to to says, match its selector (minus
// quarantined ones), its canaries those labelled canary=true, and its plan
// is resolved against them as the operator resolves a revision's
// (ADR 0016); the devices' behaviour is learned from the history between
// from and to. The errors name the field of d to fix.
func (h *History) SimulateDeployment(ctx context.Context, d *fleetv1.Deployment, from, to time.Time, o SimulateOptions) (*Prediction, error) {
	if d.Namespace == "" || d.Name == "" {
		return nil, fmt.Errorf("%w: metadata.namespace and metadata.name: set both (the simulated revision is one of namespace/name)", ErrInvalidOptions)
	}
	if len(d.Spec.AllowedGroups) > 0 {
		return nil, fmt.Errorf("%w: spec.allowedGroups: the streams hold no group membership, so targets cannot be resolved from them: remove it to simulate against every matching device", ErrInvalidOptions)
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
		Score: sc, Targets: targets, Canaries: canaries}
	if pd := d.Spec.Rollout.ProgressDeadline; pd != nil {
		rev.ProgressDeadlineSeconds = int64(pd.Duration / time.Second)
	}
	if mr := d.Spec.Rollout.MinReady; mr != nil {
		rev.MinReadySeconds = int64(mr.Duration / time.Second)
	}
	plan, batches, groups, err := resolveSimPlan(d.Spec.Rollout, targets, canaries, func(dev string) map[string]string { return labels[dev] })
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOptions, err)
	}
	rev.Plan, rev.TargetBatches, rev.TargetGroups = plan, batches, groups
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

// resolveSimPlan freezes a rollout spec's plan against sorted targets and
// canaries as the operator does (ADR 0016, operator/deployments resolvePlan):
// selector batches claim their non-canary targets first, in list order;
// count and percent batches then take the next unclaimed non-canary
// targets in device-id order, a percent being of all frozen targets,
// rounded up, at least 1; a batch left with no device is dropped; the
// targets no batch took form one last batch (100 %, no soak). Without a
// control set there is no plan. TestTheSimulatedPlanIsTheOperatorsPlan
// checks it against the operator's.
func resolveSimPlan(spec fleetv1.RolloutSpec, targets, canaries []string, labels func(string) map[string]string) (*events.RolloutPlan, []int, []int, error) {
	if !(len(spec.Batches) > 0 || spec.DisruptionBudget != nil ||
		(spec.Approval != "" && spec.Approval != fleetv1.RolloutApprovalAutomatic) ||
		(spec.OnFailure != "" && spec.OnFailure != fleetv1.RolloutOnFailureFail)) {
		return nil, nil, nil, nil
	}
	plan := &events.RolloutPlan{Batches: []events.PlanBatch{}}
	switch spec.Approval {
	case "", fleetv1.RolloutApprovalAutomatic:
	case fleetv1.RolloutApprovalManual:
		plan.Approval = events.ApprovalManual
	default:
		return nil, nil, nil, fmt.Errorf("spec.rollout.approval %q: use Automatic or Manual", spec.Approval)
	}
	switch spec.OnFailure {
	case "", fleetv1.RolloutOnFailureFail:
	case fleetv1.RolloutOnFailurePause:
		plan.OnFailure = events.OnFailurePause
	case fleetv1.RolloutOnFailureRollback:
		plan.OnFailure = events.OnFailureRollback
	default:
		return nil, nil, nil, fmt.Errorf("spec.rollout.onFailure %q: use Fail, Pause or Rollback", spec.OnFailure)
	}
	frozen := make([]events.PlanBatch, len(spec.Batches))
	for i, b := range spec.Batches {
		pb := events.PlanBatch{SuccessPercent: int(b.SuccessThreshold)}
		if pb.SuccessPercent == 0 {
			pb.SuccessPercent = 100
		}
		set := 0
		for _, ok := range []bool{b.Count != nil, b.Percent != nil, b.Selector != nil} {
			if ok {
				set++
			}
		}
		if set != 1 || pb.SuccessPercent < 0 || pb.SuccessPercent > 100 {
			return nil, nil, nil, fmt.Errorf("spec.rollout.batches[%d]: set exactly one of count, percent and selector, and a successThreshold of 1..100", i)
		}
		if b.Soak != "" {
			d, err := time.ParseDuration(b.Soak)
			if err != nil || d < 0 || d > 24*time.Hour {
				return nil, nil, nil, fmt.Errorf("spec.rollout.batches[%d].soak %q: use hours, minutes and seconds up to 24h, e.g. 90s, 5m or 1h30m", i, b.Soak)
			}
			pb.SoakSeconds = int64(d / time.Second)
		}
		frozen[i] = pb
	}
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
			if of[j] == 0 && matchLabels(b.Selector.MatchLabels, labels(t)) {
				of[j] = i + 1
			}
		}
	}
	next := 0
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
	index := make([]int, len(spec.Batches)+1)
	for i, pb := range frozen {
		if pb.Size == 0 {
			continue
		}
		plan.Batches = append(plan.Batches, pb)
		index[i+1] = len(plan.Batches)
	}
	batches := make([]int, len(targets))
	leftover := 0
	for j, k := range of {
		switch {
		case k > 0:
			batches[j] = index[k]
		case k == 0:
			leftover++
			batches[j] = len(plan.Batches) + 1
		}
	}
	if leftover > 0 {
		plan.Batches = append(plan.Batches, events.PlanBatch{Size: leftover, SuccessPercent: 100})
	}
	var groups []int
	if b := spec.DisruptionBudget; b != nil {
		budget := &events.DisruptionBudget{LabelKey: b.LabelKey}
		switch mu := b.MaxUnavailable; {
		case mu.Type == intstr.Int && mu.IntVal >= 1:
			budget.MaxUnavailable = int(mu.IntVal)
		case mu.Type == intstr.String && strings.HasSuffix(mu.StrVal, "%"):
			pct, err := strconv.Atoi(strings.TrimSuffix(mu.StrVal, "%"))
			if err != nil || pct < 1 || pct > 100 {
				return nil, nil, nil, fmt.Errorf("spec.rollout.disruptionBudget.maxUnavailable %q: use a count of at least 1 or a percentage from 1%% to 100%%", mu.String())
			}
			budget.MaxPercent = pct
		default:
			return nil, nil, nil, fmt.Errorf("spec.rollout.disruptionBudget.maxUnavailable %q: use a count of at least 1 or a percentage from 1%% to 100%%", mu.String())
		}
		values := map[string]bool{}
		for _, t := range targets {
			if v, ok := labels(t)[b.LabelKey]; ok {
				values[v] = true
			}
		}
		budget.Values = slices.Sorted(maps.Keys(values))
		groups = make([]int, len(targets))
		for i, t := range targets {
			v, ok := labels(t)[b.LabelKey]
			if !ok {
				groups[i] = len(budget.Values)
				continue
			}
			groups[i], _ = slices.BinarySearch(budget.Values, v)
		}
		plan.Budget = budget
	}
	return plan, batches, groups, nil
}

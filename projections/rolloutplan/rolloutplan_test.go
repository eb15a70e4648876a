package rolloutplan_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections/rolloutplan"
)

func ptr[T any](v T) *T { return &v }

// targets are nine frozen targets in device-id order: a1 (the canary,
// site s), then b1..b8, alternating sites n and s, b2 and b3 of tier
// gold.
var (
	targets  = []string{"a1", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"}
	canaries = []string{"a1"}
	labels   = map[string]map[string]string{
		"a1": {"site": "s", "canary": "true"},
		"b1": {"site": "n"}, "b2": {"site": "s", "tier": "gold"}, "b3": {"site": "n", "tier": "gold"}, "b4": {"site": "s"},
		"b5": {"site": "n"}, "b6": {"site": "s"}, "b7": {"site": "n"}, "b8": {"site": "s"}, "b9": {},
	}
)

func labelsOf(device string) map[string]string { return labels[device] }

func TestResolveFreezesTheRolloutPlan(t *testing.T) {
	count := func(n int32) fleetv1.RolloutBatch { return fleetv1.RolloutBatch{Count: ptr(n)} }
	percent := func(n int32) fleetv1.RolloutBatch { return fleetv1.RolloutBatch{Percent: ptr(n)} }
	selector := func(k, v string) fleetv1.RolloutBatch {
		return fleetv1.RolloutBatch{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{k: v}}}
	}
	batch := func(size, percent int) events.PlanBatch { return events.PlanBatch{Size: size, SuccessPercent: percent} }
	tests := []struct {
		name    string
		rollout fleetv1.RolloutSpec
		plan    *events.RolloutPlan
		// batches are the targets' batches: a1, b1..b8.
		batches []int
		dropped []string
	}{
		{"a rollout that sets no control has no plan and no target batches",
			fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate}, nil, nil, nil},
		{"a rollout that sets only the defaults (Automatic, Fail) has no plan",
			fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate, Approval: fleetv1.RolloutApprovalAutomatic, OnFailure: fleetv1.RolloutOnFailureFail}, nil, nil, nil},
		{"manual approval alone makes one batch of every non-canary target",
			fleetv1.RolloutSpec{Approval: fleetv1.RolloutApprovalManual},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(8, 100)}, Approval: events.ApprovalManual},
			[]int{0, 1, 1, 1, 1, 1, 1, 1, 1}, nil},
		{"a pause on failure alone makes one batch of every non-canary target",
			fleetv1.RolloutSpec{OnFailure: fleetv1.RolloutOnFailurePause},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(8, 100)}, OnFailure: events.OnFailurePause},
			[]int{0, 1, 1, 1, 1, 1, 1, 1, 1}, nil},
		{"counts take the next targets in device-id order, with their threshold and soak, and the rest form a last batch of 100 % without soak",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](2), SuccessThreshold: 50, Soak: "5m"}, {Count: ptr[int32](3), SuccessThreshold: 90, Soak: "1h30m"}}},
			&events.RolloutPlan{Batches: []events.PlanBatch{{Size: 2, SuccessPercent: 50, SoakSeconds: 300}, {Size: 3, SuccessPercent: 90, SoakSeconds: 5400}, batch(3, 100)}},
			[]int{0, 1, 1, 2, 2, 2, 3, 3, 3}, nil},
		{"a percent is of all frozen targets, canaries included, rounded up and at least 1",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{percent(20), percent(1), percent(34)}},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(2, 100), batch(1, 100), batch(4, 100), batch(1, 100)}},
			[]int{0, 1, 1, 2, 3, 3, 3, 3, 4}, nil},
		{"selector batches claim their targets first, wherever they are in the list",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{count(2), selector("site", "s")}},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(2, 100), batch(4, 100), batch(2, 100)}},
			[]int{0, 1, 2, 1, 2, 3, 2, 3, 2}, nil},
		{"a target two selectors match is in the first one's batch",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{selector("site", "s"), selector("tier", "gold")}},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(4, 100), batch(1, 100), batch(3, 100)}},
			[]int{0, 3, 1, 2, 1, 3, 1, 3, 1}, nil},
		{"a canary is in no batch, even one whose selector matches it",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{selector("canary", "true"), selector("site", "s")}},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(4, 100), batch(4, 100)}},
			[]int{0, 2, 1, 2, 1, 2, 1, 2, 1}, []string{"rollout.batches[0] (selector canary=true)"}},
		{"a batch that resolves to no device is dropped, and the message says which",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{selector("site", "moon"), count(3), count(100), count(1)}},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(3, 100), batch(5, 100)}},
			[]int{0, 1, 1, 1, 2, 2, 2, 2, 2}, []string{"rollout.batches[0] (selector site=moon)", "rollout.batches[3] (count 1)"}},
		{"batches that take every non-canary target leave no last batch",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{count(4), count(4)}, Approval: fleetv1.RolloutApprovalManual, OnFailure: fleetv1.RolloutOnFailurePause},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(4, 100), batch(4, 100)}, Approval: events.ApprovalManual, OnFailure: events.OnFailurePause},
			[]int{0, 1, 1, 1, 1, 2, 2, 2, 2}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := rolloutplan.Resolve(tc.rollout, targets, canaries, labelsOf)
			if err != nil {
				t.Fatal(err)
			}
			if got := rolloutplan.Wanted(tc.rollout); got != (tc.plan != nil) {
				t.Errorf("Wanted = %t, want %t", got, tc.plan != nil)
			}
			if diff := cmp.Diff(tc.plan, res.Plan); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.batches, res.Batches); diff != "" {
				t.Errorf("target batches (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.dropped, res.Dropped); diff != "" {
				t.Errorf("dropped (-want +got):\n%s", diff)
			}
			rev := events.DeploymentRevisionCreated{Targets: targets, Canaries: canaries, Plan: res.Plan, TargetBatches: res.Batches}
			if err := rev.CheckPlan(); err != nil {
				t.Errorf("readers would refuse the revision: %v", err)
			}
		})
	}
}

func TestResolveFreezesADisruptionBudget(t *testing.T) {
	targets := append(append([]string(nil), targets...), "b9")
	tests := []struct {
		name   string
		budget fleetv1.DisruptionBudget
		want   events.DisruptionBudget
	}{
		{"a count is frozen as maxUnavailable",
			fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromInt32(2)},
			events.DisruptionBudget{LabelKey: "site", MaxUnavailable: 2, Values: []string{"n", "s"}}},
		{"a percentage is frozen as maxPercent",
			fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromString("25%")},
			events.DisruptionBudget{LabelKey: "site", MaxPercent: 25, Values: []string{"n", "s"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := rolloutplan.Resolve(fleetv1.RolloutSpec{DisruptionBudget: &tc.budget}, targets, canaries, labelsOf)
			if err != nil {
				t.Fatal(err)
			}
			// A budget alone makes one batch of every non-canary target.
			want := &events.RolloutPlan{Batches: []events.PlanBatch{{Size: 9, SuccessPercent: 100}}, Budget: &tc.want}
			if diff := cmp.Diff(want, res.Plan); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			// a1 s, b1 n, b2 s, b3 n, b4 s, b5 n, b6 s, b7 n, b8 s, b9 without the label.
			if diff := cmp.Diff([]int{1, 0, 1, 0, 1, 0, 1, 0, 1, 2}, res.Groups); diff != "" {
				t.Errorf("target groups (-want +got):\n%s", diff)
			}
			rev := events.DeploymentRevisionCreated{Targets: targets, Canaries: canaries, Plan: res.Plan,
				TargetBatches: res.Batches, TargetGroups: res.Groups}
			if err := rev.CheckPlan(); err != nil {
				t.Errorf("readers would refuse the revision: %v", err)
			}
		})
	}
}

func TestResolveWithAPlanAndNoTargetsFreezesAnEmptyPlan(t *testing.T) {
	res, err := rolloutplan.Resolve(fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Percent: ptr[int32](50)}}}, nil, nil, labelsOf)
	if err != nil {
		t.Fatal(err)
	}
	if res.Plan == nil || len(res.Plan.Batches) != 0 || len(res.Batches) != 0 {
		t.Errorf("plan %+v, target batches %v; want a plan without batches", res.Plan, res.Batches)
	}
}

func TestResolveRefusesARolloutTheCRDWouldRefuseNamingTheField(t *testing.T) {
	tests := []struct {
		name    string
		rollout fleetv1.RolloutSpec
		want    string
	}{
		{"a batch with both count and percent", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](1)}, {Count: ptr[int32](1), Percent: ptr[int32](5)}}},
			"rollout.batches[1]: set exactly one of count, percent and selector"},
		{"a batch with none of them", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{SuccessThreshold: 50}}},
			"rollout.batches[0]: set exactly one"},
		{"a count of zero", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](0)}}}, "rollout.batches[0].count 0: use at least 1"},
		{"a percent above 100", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Percent: ptr[int32](101)}}}, "rollout.batches[0].percent 101: use 1..100"},
		{"a selector without labels", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Selector: &fleetv1.TargetSelector{}}}},
			"rollout.batches[0].selector.matchLabels is empty"},
		{"a threshold above 100", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](1), SuccessThreshold: 101}}},
			"rollout.batches[0].successThreshold 101: use 1..100"},
		{"a soak past 24h", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](1), Soak: "25h"}}},
			`rollout.batches[0].soak "25h": use hours, minutes and seconds up to 24h`},
		{"a soak that is no duration", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](1), Soak: "soon"}}}, `rollout.batches[0].soak "soon"`},
		{"an unknown onFailure", fleetv1.RolloutSpec{OnFailure: "Retry"}, `rollout.onFailure "Retry": use Fail, Pause or Rollback`},
		{"an unknown approval", fleetv1.RolloutSpec{Approval: "Sometimes"}, `rollout.approval "Sometimes": use Automatic or Manual`},
		{"a budget of zero", fleetv1.RolloutSpec{DisruptionBudget: &fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromInt32(0)}},
			`rollout.disruptionBudget.maxUnavailable "0": use a count of at least 1 or a percentage from 1% to 100%`},
		{"a budget over 100 %", fleetv1.RolloutSpec{DisruptionBudget: &fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromString("150%")}},
			`rollout.disruptionBudget.maxUnavailable "150%"`},
		{"a budget on a label key that is no label key", fleetv1.RolloutSpec{DisruptionBudget: &fleetv1.DisruptionBudget{LabelKey: "a b", MaxUnavailable: intstr.FromInt32(1)}},
			`rollout.disruptionBudget.labelKey "a b"`},
		{"more batches than the CRD allows", fleetv1.RolloutSpec{Batches: make([]fleetv1.RolloutBatch, fleetv1.MaxRolloutBatches+1)},
			"rollout.batches has 33 batches: list at most 32"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rolloutplan.Resolve(tc.rollout, targets, canaries, labelsOf)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestResolveNamesThePlaceOfEachSelectorBatchEmptyAtTheFreeze: a selector
// batch that resolves to no device is dropped, and Resolve says which
// plan batch took its place (the first batch kept after it, the leftovers
// when none, one past the last when nothing comes after it), for a
// Follow revision's followers (ADR 0026).
func TestResolveNamesThePlaceOfEachSelectorBatchEmptyAtTheFreeze(t *testing.T) {
	moon := fleetv1.RolloutBatch{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "moon"}}}
	mars := fleetv1.RolloutBatch{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "mars"}}}
	north := fleetv1.RolloutBatch{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "n"}}}
	south := fleetv1.RolloutBatch{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "s"}}}
	empty := func(before int, site string) events.EmptySelectorBatch {
		return events.EmptySelectorBatch{Before: before, Selector: map[string]string{"site": site}}
	}
	tests := []struct {
		name    string
		batches []fleetv1.RolloutBatch
		want    []events.EmptySelectorBatch
	}{
		{"no empty batch names none", []fleetv1.RolloutBatch{north}, nil},
		{"an empty first batch's place is the first batch kept", []fleetv1.RolloutBatch{moon, north, {Count: ptr[int32](1)}},
			[]events.EmptySelectorBatch{empty(1, "moon")}},
		{"two empty batches between two kept ones take the second's place", []fleetv1.RolloutBatch{north, moon, mars, {Count: ptr[int32](1)}},
			[]events.EmptySelectorBatch{empty(2, "moon"), empty(2, "mars")}},
		{"an empty last batch's place is the leftovers", []fleetv1.RolloutBatch{north, moon},
			[]events.EmptySelectorBatch{empty(2, "moon")}},
		{"with no leftovers an empty last batch comes after every batch", []fleetv1.RolloutBatch{north, south, moon},
			[]events.EmptySelectorBatch{empty(3, "moon")}},
		{"an empty count batch is dropped without a place", []fleetv1.RolloutBatch{north, south, {Count: ptr[int32](1)}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := rolloutplan.Resolve(fleetv1.RolloutSpec{Batches: tc.batches}, targets, canaries, labelsOf)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, res.EmptySelectors); diff != "" {
				t.Errorf("EmptySelectors (-want +got):\n%s", diff)
			}
		})
	}
}

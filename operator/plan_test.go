package operator_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

func ptr[T any](v T) *T { return &v }

// planDevices are nine targets in device-id order: a1 (a canary, site s),
// then b1..b8, alternating sites n and s, b2 and b3 of tier gold; and one
// device outside the selector.
func planDevices() []fleetv1.Device {
	dev := func(name string, labels map[string]string) fleetv1.Device {
		labels["role"] = "x"
		return fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: name, Labels: labels}}
	}
	return []fleetv1.Device{
		dev("b8", map[string]string{"site": "s"}),
		dev("b7", map[string]string{"site": "n"}),
		dev("b6", map[string]string{"site": "s"}),
		dev("b5", map[string]string{"site": "n"}),
		dev("b4", map[string]string{"site": "s"}),
		dev("b3", map[string]string{"site": "n", "tier": "gold"}),
		dev("b2", map[string]string{"site": "s", "tier": "gold"}),
		dev("b1", map[string]string{"site": "n"}),
		dev("a1", map[string]string{"site": "s", "canary": "true"}),
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "z9", Labels: map[string]string{"role": "other", "site": "s"}}},
	}
}

func TestResolveTargetsFreezesTheRolloutPlan(t *testing.T) {
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
		message string // in the TargetsResolved message
	}{
		{"a rollout that sets no control has no plan and no target batches",
			fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate}, nil, nil, "9 targets, 1 canaries, 0 quarantined excluded"},
		{"a rollout that sets only the defaults (Automatic, Fail) has no plan",
			fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate, Approval: fleetv1.RolloutApprovalAutomatic, OnFailure: fleetv1.RolloutOnFailureFail}, nil, nil, ""},
		{"manual approval alone makes one batch of every non-canary target",
			fleetv1.RolloutSpec{Approval: fleetv1.RolloutApprovalManual},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(8, 100)}, Approval: events.ApprovalManual},
			[]int{0, 1, 1, 1, 1, 1, 1, 1, 1}, "; a plan of 1 batches"},
		{"a pause on failure alone makes one batch of every non-canary target",
			fleetv1.RolloutSpec{OnFailure: fleetv1.RolloutOnFailurePause},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(8, 100)}, OnFailure: events.OnFailurePause},
			[]int{0, 1, 1, 1, 1, 1, 1, 1, 1}, ""},
		{"counts take the next targets in device-id order, with their threshold and soak, and the rest form a last batch of 100 % without soak",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](2), SuccessThreshold: 50, Soak: "5m"}, {Count: ptr[int32](3), SuccessThreshold: 90, Soak: "1h30m"}}},
			&events.RolloutPlan{Batches: []events.PlanBatch{{Size: 2, SuccessPercent: 50, SoakSeconds: 300}, {Size: 3, SuccessPercent: 90, SoakSeconds: 5400}, batch(3, 100)}},
			[]int{0, 1, 1, 2, 2, 2, 3, 3, 3}, "; a plan of 3 batches"},
		{"a percent is of all frozen targets, canaries included, rounded up and at least 1",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{percent(20), percent(1), percent(34)}},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(2, 100), batch(1, 100), batch(4, 100), batch(1, 100)}},
			[]int{0, 1, 1, 2, 3, 3, 3, 3, 4}, ""},
		{"selector batches claim their targets first, wherever they are in the list",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{count(2), selector("site", "s")}},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(2, 100), batch(4, 100), batch(2, 100)}},
			[]int{0, 1, 2, 1, 2, 3, 2, 3, 2}, ""},
		{"a target two selectors match is in the first one's batch",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{selector("site", "s"), selector("tier", "gold")}},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(4, 100), batch(1, 100), batch(3, 100)}},
			[]int{0, 3, 1, 2, 1, 3, 1, 3, 1}, ""},
		{"a canary is in no batch, even one whose selector matches it",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{selector("canary", "true"), selector("site", "s")}},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(4, 100), batch(4, 100)}},
			[]int{0, 2, 1, 2, 1, 2, 1, 2, 1}, "dropped, resolving to no device: rollout.batches[0] (selector canary=true)"},
		{"a batch that resolves to no device is dropped, and the message says which",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{selector("site", "moon"), count(3), count(100), count(1)}},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(3, 100), batch(5, 100)}},
			[]int{0, 1, 1, 1, 2, 2, 2, 2, 2}, "; a plan of 2 batches; dropped, resolving to no device: rollout.batches[0] (selector site=moon), rollout.batches[3] (count 1)"},
		{"batches that take every non-canary target leave no last batch",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{count(4), count(4)}, Approval: fleetv1.RolloutApprovalManual, OnFailure: fleetv1.RolloutOnFailurePause},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(4, 100), batch(4, 100)}, Approval: events.ApprovalManual, OnFailure: events.OnFailurePause},
			[]int{0, 1, 1, 1, 1, 2, 2, 2, 2}, "; a plan of 2 batches"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "api"},
				Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "x"}}, Rollout: tc.rollout}}
			res, err := operator.ResolveTargets(context.Background(), d, planDevices(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"a1", "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8"}, res.Targets); diff != "" {
				t.Fatalf("targets (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.plan, res.Plan); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.batches, res.TargetBatches); diff != "" {
				t.Errorf("target batches (-want +got):\n%s", diff)
			}
			if !strings.Contains(res.Message, tc.message) || (tc.plan == nil && strings.Contains(res.Message, "plan")) {
				t.Errorf("message %q, want it to contain %q", res.Message, tc.message)
			}
			rev := events.DeploymentRevisionCreated{Targets: res.Targets, Canaries: res.Canaries, Plan: res.Plan, TargetBatches: res.TargetBatches}
			if err := rev.CheckPlan(); err != nil {
				t.Errorf("readers would refuse the revision: %v", err)
			}
		})
	}
}

func TestResolveTargetsFreezesADisruptionBudget(t *testing.T) {
	devices := append(planDevices(), fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "b9", Labels: map[string]string{"role": "x"}}})
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
			d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "api"},
				Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "x"}},
					Rollout: fleetv1.RolloutSpec{DisruptionBudget: &tc.budget}}}
			res, err := operator.ResolveTargets(context.Background(), d, devices, nil)
			if err != nil {
				t.Fatal(err)
			}
			// A budget alone makes one batch of every non-canary target.
			want := &events.RolloutPlan{Batches: []events.PlanBatch{{Size: 9, SuccessPercent: 100}}, Budget: &tc.want}
			if diff := cmp.Diff(want, res.Plan); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
			// a1 s, b1 n, b2 s, b3 n, b4 s, b5 n, b6 s, b7 n, b8 s, b9 without the label.
			if diff := cmp.Diff([]int{1, 0, 1, 0, 1, 0, 1, 0, 1, 2}, res.TargetGroups); diff != "" {
				t.Errorf("target groups (-want +got):\n%s", diff)
			}
			rev := events.DeploymentRevisionCreated{Targets: res.Targets, Canaries: res.Canaries, Plan: res.Plan,
				TargetBatches: res.TargetBatches, TargetGroups: res.TargetGroups}
			if err := rev.CheckPlan(); err != nil {
				t.Errorf("readers would refuse the revision: %v", err)
			}
		})
	}
}

func TestResolveTargetsWithAPlanAndNoTargetsFreezesAnEmptyPlan(t *testing.T) {
	d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "api"},
		Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "none"}},
			Rollout: fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Percent: ptr[int32](50)}}}}}
	res, err := operator.ResolveTargets(context.Background(), d, planDevices(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != fleetv1.ReasonNoMatchingDevices || res.Plan == nil || len(res.Plan.Batches) != 0 || len(res.TargetBatches) != 0 {
		t.Errorf("reason %s, plan %+v, target batches %v; want NoMatchingDevices and a plan without batches", res.Reason, res.Plan, res.TargetBatches)
	}
}

func TestResolveTargetsRefusesARolloutTheCRDWouldRefuseNamingTheField(t *testing.T) {
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "api"},
				Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "x"}}, Rollout: tc.rollout}}
			_, err := operator.ResolveTargets(context.Background(), d, planDevices(), nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "lab/api") {
				t.Errorf("error %v, want one naming lab/api and %q", err, tc.want)
			}
		})
	}
}

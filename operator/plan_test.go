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

// TestResolveTargetsFreezesTheRolloutPlan checks that the operator freezes
// projections/rolloutplan's resolution into the target resolution and says
// so in the TargetsResolved message; the resolution's own cases (counts,
// percents, selectors, budgets, refusals) are rolloutplan's tests.
func TestResolveTargetsFreezesTheRolloutPlan(t *testing.T) {
	count := func(n int32) fleetv1.RolloutBatch { return fleetv1.RolloutBatch{Count: ptr(n)} }
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
		{"manual approval alone makes one batch of every non-canary target",
			fleetv1.RolloutSpec{Approval: fleetv1.RolloutApprovalManual},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(8, 100)}, Approval: events.ApprovalManual},
			[]int{0, 1, 1, 1, 1, 1, 1, 1, 1}, "; a plan of 1 batches"},
		{"a batch that resolves to no device is dropped, and the message says which",
			fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{selector("site", "moon"), count(3), count(100), count(1)}},
			&events.RolloutPlan{Batches: []events.PlanBatch{batch(3, 100), batch(5, 100)}},
			[]int{0, 1, 1, 1, 2, 2, 2, 2, 2}, "; a plan of 2 batches; dropped, resolving to no device: rollout.batches[0] (selector site=moon), rollout.batches[3] (count 1)"},
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

// TestResolveTargetsRefusesARolloutTheCRDWouldRefuseNamingTheField: the
// refusal names the Deployment and the field (every refusal is
// rolloutplan's TestResolveRefusesARolloutTheCRDWouldRefuseNamingTheField).
func TestResolveTargetsRefusesARolloutTheCRDWouldRefuseNamingTheField(t *testing.T) {
	tests := []struct {
		name    string
		rollout fleetv1.RolloutSpec
		want    string
	}{
		{"a batch with both count and percent", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](1)}, {Count: ptr[int32](1), Percent: ptr[int32](5)}}},
			"rollout.batches[1]: set exactly one of count, percent and selector"},
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

package history

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

// TestTheSimulatedPlanIsTheOperatorsPlan resolves rollout specs of every
// kind against the same devices with the simulator's resolveSimPlan and
// the operator's own ResolveTargets, and expects the same frozen plan,
// batches and budget groups.
func TestTheSimulatedPlanIsTheOperatorsPlan(t *testing.T) {
	var devices []fleetv1.Device
	labels := map[string]map[string]string{}
	for i := range 12 {
		name := fmt.Sprintf("edge-%02d", i)
		l := map[string]string{"app": "api", "site": []string{"north", "south", "east"}[i%3]}
		if i%5 == 0 {
			l["canary"] = "true"
		}
		if i == 7 {
			delete(l, "site")
		}
		labels[name] = l
		devices = append(devices, fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "lab", Labels: l}})
	}
	n := func(v int32) *int32 { return &v }
	tests := []struct {
		name string
		spec fleetv1.RolloutSpec
	}{
		{"no control set has no plan", fleetv1.RolloutSpec{}},
		{"manual approval alone is one batch", fleetv1.RolloutSpec{Approval: fleetv1.RolloutApprovalManual}},
		{"count and percent batches take the next targets, the rest is a last batch", fleetv1.RolloutSpec{OnFailure: fleetv1.RolloutOnFailureRollback,
			Batches: []fleetv1.RolloutBatch{{Count: n(2), SuccessThreshold: 50, Soak: "90s"}, {Percent: n(30)}}}},
		{"selector batches claim first, a batch left empty is dropped", fleetv1.RolloutSpec{OnFailure: fleetv1.RolloutOnFailurePause,
			Batches: []fleetv1.RolloutBatch{{Count: n(1)}, {Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "south"}}},
				{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "nowhere"}}}, {Percent: n(100), Soak: "5m"}}}},
		{"a disruption budget of a count groups by the label", fleetv1.RolloutSpec{DisruptionBudget: &fleetv1.DisruptionBudget{LabelKey: "site",
			MaxUnavailable: intstr.FromInt32(1)}, Batches: []fleetv1.RolloutBatch{{Count: n(3)}}}},
		{"a disruption budget of a percentage", fleetv1.RolloutSpec{DisruptionBudget: &fleetv1.DisruptionBudget{LabelKey: "site",
			MaxUnavailable: intstr.FromString("50%")}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: "lab", Generation: 1},
				Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"app": "api"}}, Rollout: tc.spec}}
			want, err := operator.ResolveTargets(context.Background(), d, devices, nil)
			if err != nil {
				t.Fatal(err)
			}
			plan, batches, groups, err := resolveSimPlan(tc.spec, want.Targets, want.Canaries, func(dev string) map[string]string { return labels[dev] })
			if err != nil {
				t.Fatal(err)
			}
			type frozen struct {
				Plan            *events.RolloutPlan
				Batches, Groups []int
			}
			if diff := cmp.Diff(frozen{want.Plan, want.TargetBatches, want.TargetGroups}, frozen{plan, batches, groups}); diff != "" {
				t.Errorf("(-operator +simulator):\n%s", diff)
			}
		})
	}
}

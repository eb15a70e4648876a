package operator_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

func TestApplyingADeploymentWithBatchesAppendsARevisionWithItsFrozenPlan(t *testing.T) {
	e := newEnv(t)
	e.device("c1", map[string]string{"role": "analyzer", "site": "b", "canary": "true"})
	e.device("d1", map[string]string{"role": "analyzer", "site": "a"})
	e.device("d2", map[string]string{"role": "analyzer", "site": "b"})
	e.device("d3", map[string]string{"role": "analyzer", "site": "a"})
	e.device("d4", map[string]string{"role": "analyzer", "site": "b"})
	e.device("d5", map[string]string{"role": "analyzer", "site": "a"})
	e.startOperator()

	staged := &fleetv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "staged", Namespace: e.ns},
		Spec: fleetv1.DeploymentSpec{
			TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "analyzer"}},
			Rollout: fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{
				{Count: ptr[int32](1), Soak: "2m"},
				{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "b"}}, SuccessThreshold: 50},
				{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "moon"}}},
			}, Approval: fleetv1.RolloutApprovalManual},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
				Name: "api", Image: "registry.example.com/api:v1"}}}},
		},
	}
	if err := e.c.Create(e.ctx, staged); err != nil {
		t.Fatal(err)
	}
	plain := e.deployment("plain", map[string]string{"role": "analyzer"})

	rev := e.revisionOf("staged", 1)
	if diff := cmp.Diff([]string{"c1", "d1", "d2", "d3", "d4", "d5"}, rev.Targets); diff != "" {
		t.Errorf("targets (-want +got):\n%s", diff)
	}
	// The canary c1 is in no batch; site b (d2, d4) is claimed first by
	// the selector; the count takes d1; site moon matches nothing and is
	// dropped; d3 and d5 form the last batch.
	wantPlan := &events.RolloutPlan{Batches: []events.PlanBatch{
		{Size: 1, SuccessPercent: 100, SoakSeconds: 120}, {Size: 2, SuccessPercent: 50}, {Size: 2, SuccessPercent: 100},
	}, Approval: events.ApprovalManual}
	if diff := cmp.Diff(wantPlan, rev.Plan); diff != "" {
		t.Errorf("plan (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 1, 2, 3, 2, 3}, rev.TargetBatches); diff != "" {
		t.Errorf("target batches (-want +got):\n%s", diff)
	}
	e.waitFor("the TargetsResolved condition naming the plan and the dropped batch", func() bool {
		c := meta.FindStatusCondition(e.get("staged").Status.Conditions, fleetv1.ConditionTargetsResolved)
		return c != nil && c.ObservedGeneration == 1 && c.Reason == fleetv1.ReasonResolved &&
			strings.Contains(c.Message, "a plan of 3 batches; dropped, resolving to no device: rollout.batches[2] (selector site=moon)")
	})

	t.Run("a Deployment that sets none of the controls gets the defaults and a revision without plan fields", func(t *testing.T) {
		got := e.get("plain").Spec.Rollout
		if got.Approval != fleetv1.RolloutApprovalAutomatic || got.OnFailure != fleetv1.RolloutOnFailureFail {
			t.Errorf("rollout %+v, want the API server's defaults", got)
		}
		e.revisionOf("plain", 1)
		for _, r := range e.intent("plain") {
			var data map[string]json.RawMessage
			if err := json.Unmarshal(r.Event.Data, &data); err != nil {
				t.Fatal(err)
			}
			for _, field := range []string{"plan", "targetBatches"} {
				if _, ok := data[field]; ok {
					t.Errorf("the %s event of %s has %q: %s", r.Event.Type, plain.Name, field, r.Event.Data)
				}
			}
		}
	})
}

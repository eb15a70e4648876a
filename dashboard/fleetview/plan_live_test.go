package fleetview_test

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

// TestTheDeploymentPageShowsARolloutPlan applies a Deployment with two
// batches and manual approval to a fleet with a real operator: the page
// says which batch waits for approval, and its timeline lists the batch
// transitions.
func TestTheDeploymentPageShowsARolloutPlan(t *testing.T) {
	f := newFleet(t, "view-plan", true)
	v := f.liveView(nil)
	f.device("plan-1", map[string]string{"role": "kiosk"})
	f.device("plan-2", map[string]string{"role": "kiosk"})
	dep := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "kiosk", Namespace: f.ns},
		Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "kiosk"}},
			Rollout: fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: new(int32(1))}}, Approval: fleetv1.RolloutApprovalManual},
			Score:   score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "kiosk", Image: "registry.example.com/kiosk:v1"}}}}}}
	if err := f.c.Create(f.ctx, dep); err != nil {
		t.Fatal(err)
	}
	f.revision("kiosk", 1)
	var page fleetview.DeploymentDetail
	testenv.Eventually(t, "the page shows batch 1 awaiting approval", wait, func() bool {
		p, err := v.Deployment(f.ctx, f.ns, "kiosk")
		page = p
		return err == nil && p.Plan != nil && p.Plan.AwaitingApproval == 1
	})
	if page.Plan.Batches != 2 || page.Plan.Batch != 0 || page.Plan.Paused {
		t.Errorf("plan %+v, want batch 0 of 2, not paused", page.Plan)
	}
	testenv.Eventually(t, "the timeline lists the wait for approval", wait, func() bool {
		p, err := v.Deployment(f.ctx, f.ns, "kiosk")
		if err != nil {
			return false
		}
		for _, e := range p.Timeline {
			if e.Type == events.TypeRolloutAwaitingApproval && strings.Contains(e.Summary, "batch 1 awaits approval") {
				return true
			}
		}
		return false
	})
}

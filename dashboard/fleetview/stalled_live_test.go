package fleetview_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

// TestALiveRolloutPastItsProgressDeadlineIsShownStalled: on a real
// operator, a Deployment with progressDeadline 30s whose only target
// retries a pull that cannot succeed is shown stalled on its page, naming
// the device and its report, and alerted.
func TestALiveRolloutPastItsProgressDeadlineIsShownStalled(t *testing.T) {
	f := newFleet(t, "view-stalled", true)
	v := f.liveView(nil)
	f.device("pull-1", map[string]string{"role": "typo"})
	var beats atomic.Int64
	f.heartbeats(&beats, "pull-1")
	dep := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: f.ns},
		Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "typo"}},
			Rollout: fleetv1.RolloutSpec{ProgressDeadline: &metav1.Duration{Duration: 30 * time.Second}},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "api",
				Image: "localhost/fleet-examples/analysis-apii:v1"}}}}}}
	if err := f.c.Create(f.ctx, dep); err != nil {
		t.Fatal(err)
	}
	rev := f.revision("api", 1)
	const pending = "registry unavailable, retrying: image localhost/fleet-examples/analysis-apii:v1 could not be pulled"
	f.workload("pull-1", rev, "api", events.WorkloadPending, pending)
	var d fleetview.DeploymentDetail
	testenv.Eventually(t, "the Deployment page shows the rollout stalled", wait, func() bool {
		var err error
		d, err = v.Deployment(f.ctx, f.ns, "api")
		return err == nil && d.Stalled != nil
	})
	if !strings.Contains(d.Stalled.Message, "pull-1 Pending since") || !strings.Contains(d.Stalled.Message, pending) || d.Stalled.Since.IsZero() {
		t.Errorf("stalled %+v, want pull-1's report and since when", d.Stalled)
	}
	as, err := v.Alerts(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	alerted := false
	for _, a := range as {
		alerted = alerted || (a.Kind == fleetview.AlertRolloutStalled && a.Page.Key == f.ns+"/api")
	}
	if !alerted {
		t.Errorf("alerts %+v lack rollout-stalled for %s/api", as, f.ns)
	}
}

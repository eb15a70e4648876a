package fleetview_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

// TestTheDeploymentPageShowsFollowersAndDepartures: a Follow Deployment
// (ADR 0026) on a fleet with a real operator; a device created afterwards
// is listed as a follower with why it joined, and once quarantined as a
// departure. A Frozen Deployment's page has no follow section.
func TestTheDeploymentPageShowsFollowersAndDepartures(t *testing.T) {
	f := newFleet(t, "view-follow", true)
	v := f.liveView(nil)
	f.device("follow-1", map[string]string{"role": "sensor"})
	for _, tc := range []struct {
		name    string
		targets fleetv1.RolloutTargets
	}{{"sensor", fleetv1.RolloutTargetsFollow}, {"frozen", ""}} {
		dep := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: tc.name, Namespace: f.ns},
			Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "sensor"}},
				Rollout: fleetv1.RolloutSpec{Targets: tc.targets},
				Score:   score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "sensor", Image: "registry.example.com/sensor:v1"}}}}}}
		if err := f.c.Create(f.ctx, dep); err != nil {
			t.Fatal(err)
		}
		f.revision(tc.name, 1)
	}
	f.device("follow-2", map[string]string{"role": "sensor"})
	var page fleetview.DeploymentDetail
	testenv.Eventually(t, "the page lists follow-2 as a follower", wait, func() bool {
		p, err := v.Deployment(f.ctx, f.ns, "sensor")
		page = p
		return err == nil && p.Follow != nil && len(p.Follow.Followers) == 1
	})
	got := page.Follow.Followers[0]
	if got.Device != "follow-2" || got.Reason != "Device created" || got.Change != "role=sensor" || got.Since.IsZero() {
		t.Errorf("follower %+v, want follow-2, Device created, role=sensor, a time", got)
	}

	var d fleetv1.Device
	if err := f.c.Get(f.ctx, types.NamespacedName{Namespace: f.ns, Name: "follow-2"}, &d); err != nil {
		t.Fatal(err)
	}
	d.Labels[fleetv1.LabelBlacklist] = "true"
	if err := f.c.Update(f.ctx, &d); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the page lists follow-2 as a departure", wait, func() bool {
		p, err := v.Deployment(f.ctx, f.ns, "sensor")
		page = p
		return err == nil && p.Follow != nil && len(p.Follow.Departures) == 1
	})
	if diff := cmp.Diff(&fleetview.FollowStage{Followers: []fleetview.FollowerRow{}, Departures: []fleetview.DepartureRow{{Device: "follow-2", Reason: "Device quarantined"}},
		DeparturesTotal: 1}, page.Follow); diff != "" {
		t.Errorf("follow stage (-want +got):\n%s", diff)
	}
	frozen, err := v.Deployment(f.ctx, f.ns, "frozen")
	if err != nil {
		t.Fatal(err)
	}
	if frozen.Follow != nil {
		t.Errorf("a Frozen Deployment's page has a follow stage: %+v", frozen.Follow)
	}
}

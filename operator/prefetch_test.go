package operator_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

// TestAPrefetchDeploymentOffersEveryTargetItsImagesAndCountsTheHolders: a
// Deployment with spec.rollout.prefetch hands its canary the revision while
// every other frozen target gets a fetch entry only; the targets' Fetched
// reports count in status.prefetched and move nothing of the rollout, and a
// report from a device the revision does not target counts nothing.
func TestAPrefetchDeploymentOffersEveryTargetItsImagesAndCountsTheHolders(t *testing.T) {
	e := newEnv(t)
	e.startOperator()
	e.device("rpi-1", map[string]string{"role": "pf", "canary": "true"})
	e.device("rpi-2", map[string]string{"role": "pf"})
	e.device("rpi-3", map[string]string{"role": "pf"})
	e.device("rpi-9", map[string]string{"role": "other"})
	d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: e.ns},
		Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "pf"}},
			Rollout: fleetv1.RolloutSpec{Prefetch: true},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
				Name: "api", Image: "registry.example.com/api:v1"}}}}}}
	if err := e.c.Create(e.ctx, d); err != nil {
		t.Fatal(err)
	}
	rev := e.revisionOf("api", 1)
	if !rev.Prefetch {
		t.Fatal("the revision did not freeze prefetch")
	}
	value := func(dev string) events.DeviceIntent {
		var v events.DeviceIntent
		if entry, err := e.kv.Get(e.ctx, dev); err == nil {
			_ = json.Unmarshal(entry.Value(), &v)
		}
		return v
	}
	type held struct{ Deployments, Fetch []int64 }
	heldBy := func() map[string]held {
		out := map[string]held{}
		for _, dev := range []string{"rpi-1", "rpi-2", "rpi-3", "rpi-9"} {
			var h held
			v := value(dev)
			for _, x := range v.Deployments {
				h.Deployments = append(h.Deployments, x.Generation)
			}
			for _, x := range v.Fetch {
				h.Fetch = append(h.Fetch, x.Generation)
			}
			out[dev] = h
		}
		return out
	}
	want := map[string]held{"rpi-1": {Deployments: []int64{1}}, "rpi-2": {Fetch: []int64{1}}, "rpi-3": {Fetch: []int64{1}}, "rpi-9": {}}
	e.waitFor("the canary handed the revision and the others offered it to fetch", func() bool { return cmp.Equal(want, heldBy()) })

	for _, dev := range []string{"rpi-2", "rpi-3", "rpi-9"} {
		end := time.Now().UTC()
		ev, err := events.New(events.Keys{Device: dev}, events.WorkloadFetch{Namespace: e.ns, Deployment: "api", UID: rev.UID, Generation: 1,
			RevisionID: rev.RevisionID, Phase: events.FetchDone, Images: 1, Pulled: 1, Started: end.Add(-time.Minute), Ended: &end},
			events.WithCorrelation(rev.UID, 1))
		if err != nil {
			t.Fatal(err)
		}
		m, err := events.Message(ev)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.publishReports(m); err != nil {
			t.Fatal(err)
		}
	}
	e.waitFor("status.prefetched 2", func() bool {
		st := e.get("api").Status
		return st.Prefetched != nil && *st.Prefetched == 2
	})
	st := e.get("api").Status
	if st.Counts.Succeeded != 0 || st.Counts.Failed != 0 || st.Phase != fleetv1.PhaseCanary {
		t.Errorf("fetch reports moved the rollout: phase %s, counts %+v", st.Phase, st.Counts)
	}
	if diff := cmp.Diff(want, heldBy()); diff != "" {
		t.Errorf("fetch reports changed the intent (-want +got):\n%s", diff)
	}
}

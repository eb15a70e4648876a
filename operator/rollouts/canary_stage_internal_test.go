package rollouts

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/deployments"
	devtargets "github.com/nationtech/harmony-fleet/operator/internal/targets"
	"github.com/nationtech/harmony-fleet/projections"
	"github.com/nationtech/harmony-fleet/score"
)

// A canary set whose ids do not fit in one event (issue #39): 16,000
// canaries of 63-character device ids, the longest a device id may be,
// are about 1 MiB of ids, more than a NATS message. Two rollout runners
// race to hand them the revision: one rollout.canary-stage is appended,
// without a list, and every canary's fleet-intent value is written; once
// they converge the rest is released; a runner rebuilding from the first
// event agrees.
func TestACanarySetTooLongForOneEventIsHandedTheRevisionByRacingRunnersAndRebuilt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w := newRunnerWorld(t, ctx, 2*time.Minute)

	const canaries, rest = 16000, 500
	targets := make([]string, canaries+rest)
	for i := range targets {
		targets[i] = fmt.Sprintf("edge-%s-%06d", strings.Repeat("d", 51), i) // 63 characters
	}
	res := devtargets.Resolution{Targets: targets, Canaries: targets[:canaries:canaries]}
	if projections.CanariesListed(res.Canaries) {
		t.Fatal("the canary set fits in one event: the test needs a longer one")
	}
	d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: "api", UID: "uid-1", Generation: 1},
		Spec: fleetv1.DeploymentSpec{Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
			Name: "api", Image: "registry.example.com/api:v1"}}}}}}
	evs, want, err := deployments.RevisionEvents(d, res)
	if err != nil {
		t.Fatal(err)
	}
	if err := deployments.AppendRevision(ctx, w.st, evs, 0); err != nil {
		t.Fatal(err)
	}

	// Two runners at once, as during a failover's overlap: each decides
	// the canary stage; one append wins, the other conflicts and folds it.
	liveA, liveB := &statusRecorder{}, &statusRecorder{}
	stopA, stopB := w.run(liveA), w.run(liveB)
	w.waitStatus(liveA, "big/api", "phase Canary", phase(fleetv1.PhaseCanary))
	w.waitStatus(liveB, "big/api", "phase Canary", phase(fleetv1.PhaseCanary))
	w.keyCount(canaries)
	for _, dev := range []string{targets[0], targets[canaries/2], targets[canaries-1]} {
		w.intentOf(dev, want.RevisionID)
	}
	rolloutSubject, err := events.DeploymentRolloutSubject(d.Namespace, d.Name)
	if err != nil {
		t.Fatal(err)
	}
	var types []events.Type
	for rec, err := range w.st.Replay(ctx, rolloutSubject, events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, rec.Event.Type)
	}
	if diff := cmp.Diff([]events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage}, types); diff != "" {
		t.Errorf("rollout events (-want +got):\n%s", diff)
	}

	// The canaries converge: the rest is released. A runner may fold the
	// other's release before the last reports: wait for every result.
	w.converged(want, "big", "api", res.Canaries)
	released := func(s fleetv1.DeploymentStatus) bool {
		return s.Phase == fleetv1.PhaseProgressing && s.Counts.CanariesSucceeded == canaries
	}
	live := w.waitStatus(liveA, "big/api", "the release after every canary converged", released)
	w.keyCount(len(targets))
	w.intentOf(targets[len(targets)-1], want.RevisionID)
	stopA()
	stopB()

	rebuilt := &statusRecorder{}
	stop := w.run(rebuilt)
	got := w.waitStatus(rebuilt, "big/api", "the release after every canary converged", released)
	w.keyCount(len(targets))
	stop()
	if diff := cmp.Diff(live.Counts, got.Counts); diff != "" || !cmp.Equal(live.Revision, got.Revision) {
		t.Errorf("the rebuild differs from the live state (-live +rebuilt):\n%s", diff)
	}
	if live.Counts.Canaries != canaries || int(live.Counts.Total) != len(targets) {
		t.Errorf("counts %+v, want %d canaries of %d targets", live.Counts, canaries, len(targets))
	}
}

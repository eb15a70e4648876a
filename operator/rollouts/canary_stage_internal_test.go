package rollouts

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
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
	_, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

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
	if err := deployments.AppendRevision(ctx, st, evs, 0); err != nil {
		t.Fatal(err)
	}

	run := func(status *statusRecorder) (stop func()) {
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- (&RolloutRunner{Store: st, Reader: st, KV: kv, Status: status, Log: log, StatusInterval: 20 * time.Millisecond}).Run(rctx)
		}()
		return func() {
			rcancel()
			if err := <-done; err != nil {
				t.Errorf("rollout runner: %v", err)
			}
		}
	}
	// waitPhase waits for the phase and, when converged is set, for every
	// canary's result folded (a runner may fold the other's release before
	// the last reports).
	waitPhase := func(status *statusRecorder, phase fleetv1.DeploymentPhase, converged bool) fleetv1.DeploymentStatus {
		t.Helper()
		var got fleetv1.DeploymentStatus
		if err := testenv.Poll(ctx, 2*time.Minute, func() bool {
			s, ok := status.get("big/api")
			got = s
			return ok && s.Phase == phase && (!converged || s.Counts.CanariesSucceeded == canaries)
		}); err != nil {
			t.Fatalf("%v waiting for phase %s; last status phase %s, counts %+v", err, phase, got.Phase, got.Counts)
		}
		return got
	}
	keyCount := func(want int) {
		t.Helper()
		var keys []string
		if err := testenv.Poll(ctx, 2*time.Minute, func() bool {
			keys, err = kv.Keys(ctx)
			return err == nil && len(keys) == want
		}); err != nil {
			t.Fatalf("%v waiting for %d fleet-intent keys: %d", err, want, len(keys))
		}
	}
	intentOf := func(device string) {
		t.Helper()
		v, err := kv.Get(ctx, device)
		if err != nil {
			t.Fatalf("intent of %s: %v", device, err)
		}
		var di events.DeviceIntent
		if err := json.Unmarshal(v.Value(), &di); err != nil || len(di.Deployments) != 1 || di.Deployments[0].RevisionID != want.RevisionID {
			t.Errorf("intent of %s: %s (%v)", device, v.Value(), err)
		}
	}

	// Two runners at once, as during a failover's overlap: each decides
	// the canary stage; one append wins, the other conflicts and folds it.
	liveA, liveB := &statusRecorder{}, &statusRecorder{}
	stopA, stopB := run(liveA), run(liveB)
	waitPhase(liveA, fleetv1.PhaseCanary, false)
	waitPhase(liveB, fleetv1.PhaseCanary, false)
	keyCount(canaries)
	for _, dev := range []string{targets[0], targets[canaries/2], targets[canaries-1]} {
		intentOf(dev)
	}
	rolloutSubject, err := events.DeploymentRolloutSubject(d.Namespace, d.Name)
	if err != nil {
		t.Fatal(err)
	}
	var types []events.Type
	for rec, err := range st.Replay(ctx, rolloutSubject, events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := rec.Event.Marshal(); len(b) > events.MaxEventSize {
			t.Errorf("a %s event of %d bytes", rec.Event.Type, len(b))
		}
		types = append(types, rec.Event.Type)
	}
	if diff := cmp.Diff([]events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage}, types); diff != "" {
		t.Errorf("rollout events (-want +got):\n%s", diff)
	}

	// The canaries converge: the rest is released.
	var reports []events.Event
	for _, c := range res.Canaries {
		ev, err := events.New(events.Keys{Device: c}, events.WorkloadStatus{Namespace: "big", Deployment: "api", UID: want.UID,
			Generation: want.Generation, RevisionID: want.RevisionID, Phase: events.WorkloadConverged, Since: time.Now().UTC()},
			events.WithCorrelation(want.UID, want.Generation))
		if err != nil {
			t.Fatal(err)
		}
		reports = append(reports, ev)
	}
	for len(reports) > 0 {
		n := min(len(reports), 500)
		if err := st.Report(ctx, reports[:n]...); err != nil {
			t.Fatal(err)
		}
		reports = reports[n:]
	}
	live := waitPhase(liveA, fleetv1.PhaseProgressing, true)
	keyCount(len(targets))
	intentOf(targets[len(targets)-1])
	stopA()
	stopB()

	rebuilt := &statusRecorder{}
	stop := run(rebuilt)
	got := waitPhase(rebuilt, fleetv1.PhaseProgressing, true)
	keyCount(len(targets))
	stop()
	if diff := cmp.Diff(live.Counts, got.Counts); diff != "" || !cmp.Equal(live.Revision, got.Revision) {
		t.Errorf("the rebuild differs from the live state (-live +rebuilt):\n%s", diff)
	}
	if live.Counts.Canaries != canaries || int(live.Counts.Total) != len(targets) {
		t.Errorf("counts %+v, want %d canaries of %d targets", live.Counts, canaries, len(targets))
	}
}

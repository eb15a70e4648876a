package rollouts

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/runnertest"
)

// runnerWorld is a test's embedded JetStream and fleet-intent bucket, with
// rollout runners started on them and waits for what they write.
type runnerWorld struct {
	t   *testing.T
	ctx context.Context
	st  *events.Store
	kv  jetstream.KeyValue
	log *slog.Logger
	// wait bounds each wait.
	wait time.Duration
}

func newRunnerWorld(t *testing.T, ctx context.Context, wait time.Duration) *runnerWorld {
	t.Helper()
	_, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	return &runnerWorld{t: t, ctx: ctx, st: st, kv: kv, log: slog.New(slog.NewTextHandler(io.Discard, nil)), wait: wait}
}

// run starts a rollout runner writing its statuses to status, until stop.
func (w *runnerWorld) run(status *statusRecorder) (stop func()) {
	return runnertest.Start(w.t, w.ctx, "rollout runner",
		(&RolloutRunner{Store: w.st, Reader: w.st, KV: w.kv, Status: status, Log: w.log, StatusInterval: 20 * time.Millisecond}).Run)
}

// waitStatus waits until the last status of Deployment key (namespace/name)
// holds cond.
func (w *runnerWorld) waitStatus(status *statusRecorder, key, what string, cond func(fleetv1.DeploymentStatus) bool) fleetv1.DeploymentStatus {
	w.t.Helper()
	var got fleetv1.DeploymentStatus
	if err := testenv.Poll(w.ctx, w.wait, func() bool {
		s, ok := status.Get(key)
		got = s
		return ok && cond(s)
	}); err != nil {
		w.t.Fatalf("%v waiting for %s; last status phase %s, counts %+v", err, what, got.Phase, got.Counts)
	}
	return got
}

// keyCount waits until the fleet-intent bucket holds want keys.
func (w *runnerWorld) keyCount(want int) {
	w.t.Helper()
	var keys []string
	var err error
	if err := testenv.Poll(w.ctx, w.wait, func() bool {
		keys, err = w.kv.Keys(w.ctx)
		return err == nil && len(keys) == want
	}); err != nil {
		w.t.Fatalf("%v waiting for %d fleet-intent keys: %d (%v)", err, want, len(keys), err)
	}
}

// intentOf checks that device's fleet-intent value holds one Deployment, at
// revision.
func (w *runnerWorld) intentOf(device, revision string) {
	w.t.Helper()
	v, err := w.kv.Get(w.ctx, device)
	if err != nil {
		w.t.Fatalf("intent of %s: %v", device, err)
	}
	var di events.DeviceIntent
	if err := json.Unmarshal(v.Value(), &di); err != nil || len(di.Deployments) != 1 || di.Deployments[0].RevisionID != revision {
		w.t.Errorf("intent of %s: %s (%v)", device, v.Value(), err)
	}
}

// converged reports every device's Converged result of the revision, in
// batches.
func (w *runnerWorld) converged(rev events.DeploymentRevisionCreated, namespace, name string, devices []string) {
	w.t.Helper()
	var reports []events.Event
	for _, dev := range devices {
		ev, err := events.New(events.Keys{Device: dev}, events.WorkloadStatus{Namespace: namespace, Deployment: name, UID: rev.UID,
			Generation: rev.Generation, RevisionID: rev.RevisionID, Phase: events.WorkloadConverged, Since: time.Now().UTC()},
			events.WithCorrelation(rev.UID, rev.Generation))
		if err != nil {
			w.t.Fatal(err)
		}
		reports = append(reports, ev)
	}
	for len(reports) > 0 {
		n := min(len(reports), 500)
		if err := w.st.Report(w.ctx, reports[:n]...); err != nil {
			w.t.Fatal(err)
		}
		reports = reports[n:]
	}
}

// phase is a waitStatus condition: the phase is p.
func phase(p fleetv1.DeploymentPhase) func(fleetv1.DeploymentStatus) bool {
	return func(s fleetv1.DeploymentStatus) bool { return s.Phase == p }
}

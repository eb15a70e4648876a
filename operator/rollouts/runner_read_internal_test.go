package rollouts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	devtargets "github.com/nationtech/harmony-fleet/operator/internal/targets"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/deployments"
	"github.com/nationtech/harmony-fleet/score"
)

// flakyReader is the store as the rollout runner reads it, except that
// reads of the reports stream fail after some records (a JetStream server
// that dies under the runner's consumer): the first Replay after one
// record, the first two Follows after two.
type flakyReader struct {
	*events.Store
	replays, follows atomic.Int32
	failed           atomic.Int32
}

var errServerGone = errors.New("nats: server is disconnected")

func (f *flakyReader) cut(seq iter.Seq2[events.Record, error], after int) iter.Seq2[events.Record, error] {
	return func(yield func(events.Record, error) bool) {
		n := 0
		for rec, err := range seq {
			if n == after {
				f.failed.Add(1)
				yield(events.Record{}, errServerGone)
				return
			}
			n++
			if !yield(rec, err) {
				return
			}
		}
	}
}

func (f *flakyReader) ReplaySubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error] {
	seq := f.Store.ReplaySubjects(ctx, filters, from)
	if strings.HasPrefix(filters[0], "fleet.report.") && f.replays.Add(1) == 1 {
		return f.cut(seq, 1)
	}
	return seq
}

func (f *flakyReader) FollowSubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error] {
	seq := f.Store.FollowSubjects(ctx, filters, from)
	if strings.HasPrefix(filters[0], "fleet.report.") && f.follows.Add(1) <= 2 {
		return f.cut(seq, 2)
	}
	return seq
}

// TestTheRolloutRunnerReadsAgainAfterAFailedRead: a read of a stream that
// fails (the runner's JetStream server died, the stream is electing a
// leader) is read again from after the last record folded, both while
// catching up and while following; the runner neither stops (which took
// the whole operator down with it) nor folds a record twice.
func TestTheRolloutRunnerReadsAgainAfterAFailedRead(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	targets := make([]string, n)
	for i := range targets {
		targets[i] = fmt.Sprintf("d%d", i)
	}
	d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "api", UID: "uid-1", Generation: 1},
		Spec: fleetv1.DeploymentSpec{Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
			Name: "api", Image: "registry.example.com/api:v1"}}}}}}
	evs, rev, err := deployments.RevisionEvents(d, devtargets.Resolution{Targets: targets})
	if err != nil {
		t.Fatal(err)
	}
	if err := deployments.AppendRevision(ctx, st, evs, 0); err != nil {
		t.Fatal(err)
	}
	report := func(dev string) {
		t.Helper()
		ev, err := events.New(events.Keys{Device: dev}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: rev.UID,
			Generation: rev.Generation, RevisionID: rev.RevisionID, Phase: events.WorkloadConverged, Since: time.Now().UTC()},
			events.WithCorrelation(rev.UID, rev.Generation))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Report(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	// Three reports before the runner starts: its catch-up read fails
	// after the first.
	for _, dev := range targets[:3] {
		report(dev)
	}
	reader := &flakyReader{Store: st}
	status := &statusRecorder{}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- (&RolloutRunner{Store: st, Reader: reader, KV: kv, Status: status, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
			StatusInterval: 20 * time.Millisecond}).Run(rctx)
	}()
	defer func() {
		rcancel()
		if err := <-done; err != nil {
			t.Errorf("rollout runner: %v", err)
		}
	}()
	// Once it is live (it wrote a status), the rest while it follows: two
	// follows fail.
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		_, ok := status.Get("lab/api")
		return ok
	}); err != nil {
		t.Fatalf("%v waiting for the runner to go live after a failed catch-up read", err)
	}
	for _, dev := range targets[3:] {
		report(dev)
	}
	var got fleetv1.DeploymentStatus
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		s, ok := status.Get("lab/api")
		got = s
		return ok && s.Phase == fleetv1.PhaseSucceeded
	}); err != nil {
		select {
		case err := <-done:
			t.Fatalf("the rollout runner stopped after a failed read: %v", err)
		default:
		}
		t.Fatalf("%v waiting for the rollout to succeed after failed reads; last status %+v", err, got)
	}
	if got.Counts.Succeeded != n || got.Counts.Total != n {
		t.Errorf("counts %+v after failed reads, want %d of %d succeeded, each device once", got.Counts, n, n)
	}
	if f := reader.failed.Load(); f != 3 {
		t.Errorf("%d reads failed; the test must fail the catch-up and two follows", f)
	}
}

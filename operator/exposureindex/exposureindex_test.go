package exposureindex_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/operator/exposureindex"
)

// report stores one workload report of device for generation gen of
// lab/api.
func report(t *testing.T, ctx context.Context, st *events.Store, device string, gen int64, phase events.WorkloadPhase) {
	t.Helper()
	ev, err := events.New(events.Keys{Device: device}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "uid-api",
		Generation: gen, RevisionID: "r", Phase: phase, Since: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Report(ctx, ev); err != nil {
		t.Fatal(err)
	}
}

// revision stores generation gen of lab/api in the intent: the index
// records only revisions an intent holds (ADR 0033, "Addendum: a bound per
// device").
func revision(t *testing.T, ctx context.Context, st *events.Store, gen int64) {
	t.Helper()
	ev, err := events.New(events.Keys{Namespace: "lab", Name: "api"}, events.DeploymentRevisionCreated{UID: "uid-api", Generation: gen,
		RevisionID: "r", ScoreDigest: "sha256:api", Score: []byte(`{"type":"PodmanV0","data":{"services":[]}}`), Targets: []string{"d1"}},
		events.WithCorrelation("uid-api", gen))
	if err != nil {
		t.Fatal(err)
	}
	natstest.Write(t, ctx, st, ev)
}

// TestTheRunnerFollowsTheReportsAndResumesAfterARestart runs the role,
// stores reports while it follows, stops it, stores more and starts it
// again: the index holds each record once, the later reports' too.
func TestTheRunnerFollowsTheReportsAndResumesAfterARestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	start := func() (stop func()) {
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- (&exposureindex.Runner{Store: st, RetryMin: 10 * time.Millisecond}).Run(rctx) }()
		return func() {
			rcancel()
			if err := <-done; err != nil {
				t.Errorf("Run after its context ended: %v", err)
			}
		}
	}
	waitRecords := func(n uint64) {
		testenv.EventuallyErr(t, "the index's records", 30*time.Second, func() error {
			last, err := st.IndexLastSequence(ctx)
			if err != nil {
				return err
			}
			if last != n {
				return fmt.Errorf("the index holds %d records, want %d", last, n)
			}
			return nil
		})
	}
	revision(t, ctx, st, 1)
	stop := start()
	report(t, ctx, st, "d1", 1, events.WorkloadApplying)  // opened
	report(t, ctx, st, "d1", 1, events.WorkloadApplying)  // nothing: the same
	report(t, ctx, st, "d1", 1, events.WorkloadConverged) // phase
	waitRecords(2)
	stop()
	revision(t, ctx, st, 2)
	report(t, ctx, st, "d1", 2, events.WorkloadApplying) // ended (1) and opened (2)
	stop = start()
	defer stop()
	waitRecords(4)
}

// TestTheRunnerRefusesMissingStore checks Validate.
func TestTheRunnerRefusesMissingStore(t *testing.T) {
	err := (&exposureindex.Runner{}).Run(context.Background())
	if !errors.Is(err, exposureindex.ErrInvalidOptions) {
		t.Fatalf("Run without a store: %v, want ErrInvalidOptions", err)
	}
}

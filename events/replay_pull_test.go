package events_test

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// TestAReplayOfManyPullsHandsEveryRecordOnceInStreamOrder: a replay longer
// than several pull requests (events reads with its own pulls, not the
// ordered consumer) hands every stored record of its filter once, in
// stream order, the one that does not decode in its place, and none
// stored after it began; a record lost or handed out of order fails it.
func TestAReplayOfManyPullsHandsEveryRecordOnceInStreamOrder(t *testing.T) {
	ctx := testContext(t)
	srv, st := natstest.Provisioned(t)
	nc := natstest.Connect(t, srv)
	const n = 20000 // more than two pull requests' worth
	evs := make([]events.Event, 0, 1000)
	for i := range n {
		evs = append(evs, workload(t, fmt.Sprintf("d%d", i%37), i))
		if len(evs) == cap(evs) {
			if err := st.Report(ctx, evs...); err != nil {
				t.Fatal(err)
			}
			evs = evs[:0]
		}
		if i == n/2 {
			natstest.PublishStored(t, nc, &nats.Msg{Subject: "fleet.report.d3.workload", Data: []byte(`{"not":"an event"}`)})
		}
	}
	// Another filter's records, between, are not handed.
	natstest.Report(t, ctx, st, taskStatus(t, "d1"))
	replay := func(t *testing.T, at func(seq uint64)) {
		t.Helper()
		var seq uint64
		var gens []int64
		undecodable := 0
		for rec, err := range st.Replay(ctx, "fleet.report.*.workload", events.FromStart()) {
			if err != nil {
				if _, ok := events.AsRecordError(err); !ok {
					t.Fatal(err)
				}
				undecodable++
			}
			if rec.Sequence != seq+1 {
				t.Fatalf("record of sequence %d after %d", rec.Sequence, seq)
			}
			seq = rec.Sequence
			if err == nil {
				d, derr := events.Decode[events.WorkloadStatus](rec.Event)
				if derr != nil {
					t.Fatal(derr)
				}
				gens = append(gens, d.Generation)
			}
			at(seq)
		}
		if undecodable != 1 || len(gens) != n {
			t.Fatalf("%d records and %d undecodable; want %d and 1", len(gens), undecodable, n)
		}
		for i, g := range gens {
			if g != int64(i) {
				t.Fatalf("record %d is report %d", i, g)
			}
		}
		if seq != n+1 {
			t.Fatalf("the replay ended at sequence %d; want %d", seq, n+1)
		}
	}
	t.Run("a consumer the server deleted is replaced after the last record", func(t *testing.T) {
		s, err := st.JetStream().Stream(ctx, events.StreamReports)
		if err != nil {
			t.Fatal(err)
		}
		deleted := 0
		replay(t, func(seq uint64) {
			if seq != 100 && seq != 15000 {
				return
			}
			for name := range s.ConsumerNames(ctx).Name() {
				if err := s.DeleteConsumer(ctx, name); err != nil {
					t.Fatal(err)
				}
				deleted++
			}
		})
		if deleted != 2 {
			t.Fatalf("deleted %d consumers during the replay; want 2", deleted)
		}
	})
	t.Run("a record stored after the replay began is not handed", func(t *testing.T) {
		replay(t, func(seq uint64) {
			if seq == 1 {
				natstest.Report(t, ctx, st, workload(t, "late", n))
			}
		})
	})
}

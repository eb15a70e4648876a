package rollouts

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// TestAStoppedIntentWriterLeavesNoBatchInFlight: a writer whose context
// ends (the operator stops) sends no new atomic batch and waits for the
// answer of each batch it already sent, so that when the runner returns
// the server is done with its writes. Before, it returned with batches on
// the wire that the server stored while it shut down, after the test had
// returned (dashboard/fleetview TestLiveViewOfARealFleet failed removing
// its store folder: "KV_fleet-intent/batches: directory not empty").
func TestAStoppedIntentWriterLeavesNoBatchInFlight(t *testing.T) {
	srv, st := natstest.Provisioned(t)
	w := newIntentWriter(t, st, true)
	// Every write the server gets on the bucket's subjects, counted by an
	// observer on a connection of its own.
	obs := natstest.Connect(t, srv)
	var mu sync.Mutex
	sent := 0
	sub, err := obs.Subscribe("$KV."+w.kv.Bucket()+".>", func(*nats.Msg) {
		mu.Lock()
		sent++
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}

	// Three batches' worth (two in flight at once); the context ends as
	// the first answer comes.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var queued []kvWrite
	for i := range 2*kvBatch + kvBatch/2 {
		queued = append(queued, kvWrite{op: "put", dev: fmt.Sprintf("stop-%d", i), val: []byte(`{"deployments":[]}`)})
	}
	settled, stalled := 0, false
	done := func(op, dev string, slot kvSlot, err error) {
		settled++
		cancel()
	}
	w.batches(ctx, queued, done, &stalled, func(kvWrite) { settled++ })

	// Whatever the writer published has reached the observer once both
	// connections made a round trip.
	if err := w.js.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := obs.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if sent != settled {
		t.Errorf("the stopped writer sent %d writes and settled %d: %d left in flight", sent, settled, sent-settled)
	}
	if sent == len(queued) {
		t.Errorf("the stopped writer sent all %d writes: it went on after its context ended", sent)
	}
}

package projections_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/projections"
)

// TestASnapshotResumesToTheSameState folds a history up to a cut, writes and
// reads the fold back as JSON, folds the rest onto it, and expects exactly
// the values of a rebuild from zero.
func TestASnapshotResumesToTheSameState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	const cut = 4_000
	_, seqs := history(t, ctx, st, 8_000, []int{cut})

	half, _ := rebuild(t, ctx, st, seqs[cut])
	// Through JSON, as a runner stores it.
	type snap struct {
		Rollouts map[string]projections.Rollout `json:"rollouts"`
		Intent   *projections.Intent            `json:"intent"`
	}
	s := snap{Rollouts: map[string]projections.Rollout{}, Intent: half.intent}
	for k, r := range half.rollouts {
		s.Rollouts[k.Namespace+"/"+k.Name] = r
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var back snap
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	resumed := newFleet(false)
	resumed.intent = back.Intent
	for k, r := range back.Rollouts {
		ns, name, _ := cutKey(k)
		resumed.rollouts[events.Keys{Namespace: ns, Name: name}] = r
	}
	if diff := cmp.Diff(half.snapshot(t), resumed.snapshot(t)); diff != "" {
		t.Fatalf("restored state differs (-folded +restored):\n%s", diff)
	}
	for _, filter := range []string{"fleet.report.*.workload", "fleet.rollout.deployment.*.*", "fleet.intent.deployment.*.*"} {
		stream, _ := events.StreamOf(filter)
		for r, err := range st.Replay(ctx, filter, events.FromSequence(seqs[cut][stream]+1)) {
			if err != nil {
				t.Fatal(err)
			}
			resumed.apply(r.Event)
		}
	}
	full, _ := rebuild(t, ctx, st, map[string]uint64{events.StreamIntent: ^uint64(0), events.StreamRollout: ^uint64(0), events.StreamReports: ^uint64(0)})
	if diff := cmp.Diff(full.snapshot(t), resumed.snapshot(t)); diff != "" {
		t.Errorf("resumed differs from a rebuild from zero (-rebuild +resumed):\n%s", diff)
	}
}

func cutKey(k string) (string, string, bool) {
	for i := range k {
		if k[i] == '/' {
			return k[:i], k[i+1:], true
		}
	}
	return k, "", false
}

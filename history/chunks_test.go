package history_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

func TestAChunkedRevisionIsReadWholeAndOrphanChunksAndIncompleteRevisionsAreNot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	dep := events.Keys{Namespace: "lab", Name: "api"}
	write := func(d events.Data) {
		t.Helper()
		ev, err := events.New(dep, d)
		if err != nil {
			t.Fatal(err)
		}
		natstest.Write(t, ctx, st, ev)
	}
	full := events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "1-abcdef12", ScoreDigest: "sha256:00",
		Score: []byte(`{"type":"PodmanV0","data":{"services":[{"name":"api","image":"registry.example.com/api:v1"}]}}`)}
	for i := range 300 {
		full.Targets = append(full.Targets, fmt.Sprintf("edge-%03d", i))
	}
	full.Canaries = []string{"edge-000", "edge-001"}
	created, chunks := events.ChunkRevision(full, 1000)
	if len(chunks) < 3 {
		t.Fatalf("%d chunks, want several", len(chunks))
	}
	// An attempt that crashed after two chunks, then the whole revision.
	write(chunks[0])
	write(chunks[1])
	for _, c := range chunks {
		write(c)
	}
	write(created)
	// Generation 2 names chunks that were never appended.
	broken := created
	broken.Generation, broken.RevisionID = 2, "2-abcdef12"
	write(broken)

	skips := events.NewSkipCounter()
	h, err := history.New(history.Options{Reader: st, Skips: skips})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := h.Deployment(ctx, "lab", "api")
	if err != nil {
		t.Fatal(err)
	}
	if len(tl.Revisions) != 1 {
		t.Fatalf("%d revisions, want the complete one only", len(tl.Revisions))
	}
	rv := tl.Revisions[0]
	if diff := cmp.Diff(full.Targets, rv.Targets); diff != "" || !slices.Equal(full.Canaries, rv.Canaries) || len(rv.Results) != len(full.Targets) {
		t.Errorf("revision targets (-want +got):\n%s\ncanaries %v, %d results", diff, rv.Canaries, len(rv.Results))
	}
	listed := 0
	for _, e := range tl.Entries {
		if strings.HasPrefix(e.Summary, "target chunk") {
			listed++
		}
	}
	if listed != len(chunks)+2 {
		t.Errorf("%d chunk entries, want every chunk listed (%d)", listed, len(chunks)+2)
	}
	if n := skips.Skipped(events.StreamIntent, events.ReasonInvalidData); n != 1 {
		t.Errorf("%d records skipped, want the incomplete revision", n)
	}

	last := full.Targets[len(full.Targets)-1] // in the last chunk
	dtl, err := h.Device(ctx, last)
	if err != nil {
		t.Fatal(err)
	}
	frozen := false
	for _, e := range dtl.Entries {
		frozen = frozen || strings.Contains(e.Summary, "freezes it as a target")
	}
	if !frozen {
		t.Errorf("the timeline of %s does not say the revision froze it", last)
	}
}

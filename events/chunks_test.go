package events_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
)

// chunkedRevision is a revision of n targets split in chunks of at most
// maxBytes, as events: the chunks, then the revision.
func chunkedRevision(t *testing.T, uid string, n, maxBytes int) (events.DeploymentRevisionCreated, []events.Event) {
	t.Helper()
	keys := events.Keys{Namespace: "prod", Name: "api"}
	full := events.DeploymentRevisionCreated{UID: uid, Generation: 1, RevisionID: "1-abcdef12", ScoreDigest: "sha256:00",
		Score: []byte(`{}`), Targets: []string{}, Canaries: []string{}}
	for i := range n {
		full.Targets = append(full.Targets, fmt.Sprintf("dev-%04d", i))
	}
	full.Canaries = append(full.Canaries, full.Targets[:2]...)
	created, chunks := events.ChunkRevision(full, maxBytes)
	var evs []events.Event
	for _, c := range chunks {
		ev, err := events.New(keys, c)
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	ev, err := events.New(keys, created)
	if err != nil {
		t.Fatal(err)
	}
	return full, append(evs, ev)
}

// assemble feeds evs to one assembler and returns the revisions it hands
// out whole and the errors it returns.
func assemble(t *testing.T, evs []events.Event) ([]events.DeploymentRevisionCreated, []error) {
	t.Helper()
	var a events.RevisionAssembler
	var out []events.DeploymentRevisionCreated
	var errs []error
	for _, ev := range evs {
		whole, ok, err := a.Add(ev)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			d, err := events.Decode[events.DeploymentRevisionCreated](whole)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out, errs
}

func TestARevisionThatFitsIsNotChunked(t *testing.T) {
	full, evs := chunkedRevision(t, "u1", 10, 0)
	if len(evs) != 1 {
		t.Fatalf("%d events, want 1", len(evs))
	}
	got, errs := assemble(t, evs)
	if len(errs) > 0 || len(got) != 1 || !cmp.Equal(full, got[0]) {
		t.Fatalf("got %v %v", got, errs)
	}
}

func TestChunksThenTheRevisionAssembleToTheFrozenLists(t *testing.T) {
	full, evs := chunkedRevision(t, "u1", 100, 200)
	if len(evs) < 4 {
		t.Fatalf("%d events, want several chunks", len(evs))
	}
	d, _ := events.Decode[events.DeploymentRevisionCreated](evs[len(evs)-1])
	if len(d.Targets) != 0 || d.TargetChunks != len(evs)-1 || d.TargetsDigest != events.TargetsDigest(full.Targets) {
		t.Fatalf("the revision event: %d targets, %d chunks, digest %s", len(d.Targets), d.TargetChunks, d.TargetsDigest)
	}
	got, errs := assemble(t, evs)
	if len(errs) > 0 || len(got) != 1 {
		t.Fatalf("got %d revisions, errors %v", len(got), errs)
	}
	if diff := cmp.Diff(full, got[0]); diff != "" {
		t.Errorf("assembled (-want +got):\n%s", diff)
	}
}

func TestOrphanChunksOfAnEarlierAttemptAreIgnored(t *testing.T) {
	full, evs := chunkedRevision(t, "u1", 100, 200)
	_, crashed := chunkedRevision(t, "u1", 100, 200)
	got, errs := assemble(t, append(slices.Clone(crashed[:3]), evs...))
	if len(errs) > 0 || len(got) != 1 || !cmp.Equal(full, got[0]) {
		t.Fatalf("got %d revisions, errors %v", len(got), errs)
	}
}

func TestARevisionWhoseChunksAreMissingOrWrongIsNotHandedOut(t *testing.T) {
	_, evs := chunkedRevision(t, "u1", 100, 200)
	_, other := chunkedRevision(t, "u2", 100, 200)
	last := len(evs) - 1
	cases := map[string][]events.Event{
		"no chunks":                   evs[last:],
		"a chunk missing":             append(slices.Clone(evs[:1]), evs[2:]...),
		"chunks of another uid":       append(slices.Clone(other[:last]), evs[last]),
		"chunks out of order":         append(append([]events.Event{evs[1], evs[0]}, evs[2:last]...), evs[last]),
		"a chunk between interleaved": append(append(slices.Clone(evs[:2]), other[1]), evs[2:]...),
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			got, errs := assemble(t, in)
			if len(got) != 0 || len(errs) != 1 || !errors.Is(errs[0], events.ErrChunksMissing) {
				t.Errorf("got %d revisions, errors %v; want none and ErrChunksMissing", len(got), errs)
			}
		})
	}
	// Chunks whose targets do not match the digest the revision names.
	d, _ := events.Decode[events.DeploymentRevisionCreated](evs[last])
	d.TargetsDigest = events.TargetsDigest([]string{"someone-else"})
	forged, err := events.New(evs[last].Keys, d)
	if err != nil {
		t.Fatal(err)
	}
	got, errs := assemble(t, append(slices.Clone(evs[:last]), forged))
	if len(got) != 0 || len(errs) != 1 || errors.Is(errs[0], events.ErrChunksMissing) {
		t.Errorf("a digest mismatch: got %d revisions, errors %v", len(got), errs)
	}
}

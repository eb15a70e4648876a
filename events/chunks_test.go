package events_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
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

// plannedRevision is a revision of n targets (the first two canaries) with
// a plan of three batches: 10 targets, then 30 %, then the rest.
func plannedRevision(n int) events.DeploymentRevisionCreated {
	d := events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "1-abcdef12", ScoreDigest: "sha256:00",
		Score: []byte(`{}`), Targets: []string{}, Canaries: []string{}, TargetBatches: []int{}, TargetGroups: []int{}}
	second := (30*n + 99) / 100
	for i := range n {
		id := fmt.Sprintf("edge-device-%06d", i)
		d.Targets = append(d.Targets, id)
		d.TargetGroups = append(d.TargetGroups, i%4) // 3: without the label
		switch {
		case i < 2:
			d.Canaries = append(d.Canaries, id)
			d.TargetBatches = append(d.TargetBatches, 0)
		case i < 12:
			d.TargetBatches = append(d.TargetBatches, 1)
		case i < 12+second:
			d.TargetBatches = append(d.TargetBatches, 2)
		default:
			d.TargetBatches = append(d.TargetBatches, 3)
		}
	}
	d.Plan = &events.RolloutPlan{Batches: []events.PlanBatch{
		{Size: 10, SuccessPercent: 90, SoakSeconds: 300}, {Size: second, SuccessPercent: 100}, {Size: n - 12 - second, SuccessPercent: 100},
	}, Approval: events.ApprovalManual, OnFailure: events.OnFailurePause,
		Budget: &events.DisruptionBudget{LabelKey: "site", MaxUnavailable: 2, Values: []string{"a", "b", "c"}}}
	return d
}

// eventsOf makes the events of a chunked revision: its chunks, then it.
func eventsOf(t *testing.T, created events.DeploymentRevisionCreated, chunks []events.DeploymentRevisionTargets) []events.Event {
	t.Helper()
	keys := events.Keys{Namespace: "prod", Name: "api"}
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
	return append(evs, ev)
}

func TestARevisionWithAPlanOfAHundredThousandTargetsRoundTripsThroughChunksWithItsBatchesAligned(t *testing.T) {
	full := plannedRevision(100000)
	if err := full.CheckPlan(); err != nil {
		t.Fatalf("the test's revision: %v", err)
	}
	created, chunks := events.ChunkRevision(full, 0)
	if len(chunks) < 2 {
		t.Fatalf("%d chunks, want several", len(chunks))
	}
	if created.TargetBatches != nil || created.TargetGroups != nil || len(created.Targets) != 0 || created.Plan == nil {
		t.Errorf("the revision event carries %d target batches, %d targets and plan %v; want none, none and the plan",
			len(created.TargetBatches), len(created.Targets), created.Plan)
	}
	for _, c := range chunks {
		if len(c.TargetBatches) != len(c.Targets) || len(c.TargetGroups) != len(c.Targets) {
			t.Errorf("chunk %d: %d batch and %d group entries for %d targets", c.Chunk, len(c.TargetBatches), len(c.TargetGroups), len(c.Targets))
		}
	}
	evs := eventsOf(t, created, chunks)
	for _, ev := range evs {
		if b, _ := ev.Marshal(); len(b) > events.MaxEventSize {
			t.Fatalf("a %s event of %d bytes", ev.Type, len(b))
		}
	}
	got, errs := assemble(t, evs)
	if len(errs) > 0 || len(got) != 1 {
		t.Fatalf("got %d revisions, errors %v", len(got), errs)
	}
	if diff := cmp.Diff(full, got[0]); diff != "" {
		t.Errorf("assembled (-want +got):\n%s", diff)
	}
}

func TestAChunkWithBatchNumbersStaysWithinItsByteBound(t *testing.T) {
	const maxBytes = 300
	full := plannedRevision(200)
	_, chunks := events.ChunkRevision(full, maxBytes)
	if len(chunks) < 10 {
		t.Fatalf("%d chunks, want many", len(chunks))
	}
	for _, c := range chunks {
		ids, _ := json.Marshal(c.Targets)
		canaries, _ := json.Marshal(c.Canaries)
		batches, _ := json.Marshal(c.TargetBatches)
		groups, _ := json.Marshal(c.TargetGroups)
		// Each array adds its brackets and has one comma less than counted.
		if n := len(ids) + len(canaries) + len(batches) + len(groups); n > maxBytes+8 {
			t.Errorf("chunk %d: %d bytes of ids and batch numbers, bound %d", c.Chunk, n, maxBytes)
		}
	}
}

func TestARevisionWhosePlanDoesNotMatchItsTargetsIsRefused(t *testing.T) {
	tests := []struct {
		name     string
		maxBytes int
		change   func(d *events.DeploymentRevisionCreated, chunks []events.DeploymentRevisionTargets)
		want     string
	}{
		{"an unchunked revision with one batch entry too few", 0, func(d *events.DeploymentRevisionCreated, _ []events.DeploymentRevisionTargets) {
			d.TargetBatches = d.TargetBatches[1:]
		}, "19 targetBatches entries for 20 targets"},
		{"an unchunked revision with batch entries and no plan", 0, func(d *events.DeploymentRevisionCreated, _ []events.DeploymentRevisionTargets) {
			d.Plan = nil
		}, "without a plan"},
		{"a canary in a batch", 0, func(d *events.DeploymentRevisionCreated, _ []events.DeploymentRevisionTargets) {
			d.TargetBatches[0] = 1
		}, `canary "edge-device-000000" is in batch 1`},
		{"a target in a batch the plan does not have", 0, func(d *events.DeploymentRevisionCreated, _ []events.DeploymentRevisionTargets) {
			d.TargetBatches[19] = 4
		}, "is in batch 4, the plan has 3"},
		{"a batch whose size differs from its targets", 0, func(d *events.DeploymentRevisionCreated, _ []events.DeploymentRevisionTargets) {
			d.TargetBatches[19] = 2
		}, "plan batch 2 has size 6, 7 targets are in it"},
		{"a chunk without its batch entries", 200, func(_ *events.DeploymentRevisionCreated, chunks []events.DeploymentRevisionTargets) {
			chunks[1].TargetBatches = nil
		}, "for 20 targets"},
		{"a chunk with one batch entry less than targets", 200, func(_ *events.DeploymentRevisionCreated, chunks []events.DeploymentRevisionTargets) {
			chunks[1].TargetBatches = chunks[1].TargetBatches[1:]
		}, "chunk 2 carries targetBatches or targetGroups that are not one per target"},
		{"a revision event that carries batch entries of its own before the chunks'", 200, func(d *events.DeploymentRevisionCreated, _ []events.DeploymentRevisionTargets) {
			d.TargetBatches = []int{1}
		}, "21 targetBatches entries for 20 targets"},
		{"a target in a budget group that does not exist", 0, func(d *events.DeploymentRevisionCreated, _ []events.DeploymentRevisionTargets) {
			d.TargetGroups[5] = 4
		}, "is in group 4, the budget has 3 values"},
		{"group entries without a budget", 0, func(d *events.DeploymentRevisionCreated, _ []events.DeploymentRevisionTargets) {
			d.Plan.Budget = nil
		}, "20 targetGroups entries without a disruption budget"},
		{"a budget with both a count and a percentage", 0, func(d *events.DeploymentRevisionCreated, _ []events.DeploymentRevisionTargets) {
			d.Plan.Budget.MaxPercent = 10
		}, "exactly one, positive"},
		{"a chunk with one group entry less than targets", 200, func(_ *events.DeploymentRevisionCreated, chunks []events.DeploymentRevisionTargets) {
			chunks[1].TargetGroups = chunks[1].TargetGroups[1:]
		}, "chunk 2 carries targetBatches or targetGroups that are not one per target"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			full := plannedRevision(20)
			created, chunks := events.ChunkRevision(full, tc.maxBytes)
			if (tc.maxBytes > 0) != (len(chunks) > 1) {
				t.Fatalf("%d chunks", len(chunks))
			}
			tc.change(&created, chunks)
			got, errs := assemble(t, eventsOf(t, created, chunks))
			if len(got) != 0 || len(errs) != 1 || !errors.Is(errs[0], events.ErrPlanMisaligned) {
				t.Fatalf("got %d revisions, errors %v; want none and ErrPlanMisaligned", len(got), errs)
			}
			if !strings.Contains(errs[0].Error(), tc.want) {
				t.Errorf("error %q lacks %q", errs[0], tc.want)
			}
		})
	}
}

// chunkedTaskRun is a TaskRun creation of n sorted targets split in chunks
// of at most maxBytes, as events: the chunks, then the creation.
func chunkedTaskRun(t *testing.T, uid string, n, maxBytes int) (events.TaskRunCreated, []events.Event) {
	t.Helper()
	keys := events.Keys{Namespace: "prod", Name: "upgrade"}
	full := events.TaskRunCreated{UID: uid, Generation: 1, Task: "system-upgrade", Targets: []string{},
		Window: &events.MaintenanceWindow{Start: "02:00", Duration: "2h"}}
	for i := range n {
		full.Targets = append(full.Targets, fmt.Sprintf("edge-device-%06d", i))
	}
	created, chunks := events.ChunkTaskRun(full, maxBytes)
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

// assembleTaskRuns feeds evs to one assembler and returns the TaskRun
// creations it hands out whole and the errors it returns.
func assembleTaskRuns(t *testing.T, evs []events.Event) ([]events.TaskRunCreated, []error) {
	t.Helper()
	var a events.RevisionAssembler
	var out []events.TaskRunCreated
	var errs []error
	for _, ev := range evs {
		whole, ok, err := a.Add(ev)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			d, err := events.Decode[events.TaskRunCreated](whole)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out, errs
}

func TestATaskRunCreationIsChunkedAsARevisionIs(t *testing.T) {
	tests := []struct {
		name      string
		n         int
		maxBytes  int
		preceding int // events of an earlier attempt (orphan chunks) before it
		wantChunk bool
	}{
		{name: "a creation that fits is one event with neither chunk field", n: 10},
		{name: "a creation of a hundred thousand targets round-trips through chunks within the event bound", n: 100000, wantChunk: true},
		{name: "orphan chunks of an earlier attempt are ignored", n: 100, maxBytes: 200, preceding: 3, wantChunk: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			full, evs := chunkedTaskRun(t, "u1", tt.n, tt.maxBytes)
			if got := len(evs) > 1; got != tt.wantChunk {
				t.Fatalf("%d events: chunked %v, want %v", len(evs), got, tt.wantChunk)
			}
			last, err := events.Decode[events.TaskRunCreated](evs[len(evs)-1])
			if err != nil {
				t.Fatal(err)
			}
			if !tt.wantChunk {
				b, _ := json.Marshal(last)
				if strings.Contains(string(b), "targetChunks") || strings.Contains(string(b), "targetsDigest") {
					t.Errorf("an unchunked creation names chunks: %s", b)
				}
			} else if len(last.Targets) != 0 || last.TargetChunks != len(evs)-1 || last.TargetsDigest != events.TargetsDigest(full.Targets) {
				t.Errorf("the creation event: %d targets, %d chunks, digest %s", len(last.Targets), last.TargetChunks, last.TargetsDigest)
			}
			for _, ev := range evs {
				if b, _ := ev.Marshal(); len(b) > events.MaxEventSize {
					t.Fatalf("a %s event of %d bytes", ev.Type, len(b))
				}
			}
			in := evs
			if tt.preceding > 0 {
				_, crashed := chunkedTaskRun(t, "u1", tt.n, tt.maxBytes)
				in = append(slices.Clone(crashed[:tt.preceding]), evs...)
			}
			got, errs := assembleTaskRuns(t, in)
			if len(errs) > 0 || len(got) != 1 {
				t.Fatalf("got %d creations, errors %v", len(got), errs)
			}
			if diff := cmp.Diff(full, got[0]); diff != "" {
				t.Errorf("assembled (-want +got):\n%s", diff)
			}
		})
	}
}

func TestATaskRunCreationWhoseChunksAreMissingOrWrongIsNotHandedOut(t *testing.T) {
	_, evs := chunkedTaskRun(t, "u1", 100, 200)
	_, other := chunkedTaskRun(t, "u2", 100, 200)
	_, revision := chunkedRevision(t, "u1", 100, 200) // a Deployment's, same namespace and name keys
	last := len(evs) - 1
	d, _ := events.Decode[events.TaskRunCreated](evs[last])
	d.TargetsDigest = events.TargetsDigest([]string{"someone-else"})
	forged, err := events.New(evs[last].Keys, d)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		in          []events.Event
		wantMissing bool
	}{
		{"no chunks", evs[last:], true},
		{"a chunk missing", append(slices.Clone(evs[:1]), evs[2:]...), true},
		{"chunks of another uid", append(slices.Clone(other[:last]), evs[last]), true},
		{"chunks out of order", append(append([]events.Event{evs[1], evs[0]}, evs[2:last]...), evs[last]), true},
		{"a Deployment revision's chunks in place of the TaskRun's", append(slices.Clone(revision[:len(revision)-1]), evs[last]), true},
		{"chunks whose targets do not match the digest", append(slices.Clone(evs[:last]), forged), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := assembleTaskRuns(t, tt.in)
			if len(got) != 0 || len(errs) != 1 || errors.Is(errs[0], events.ErrChunksMissing) != tt.wantMissing {
				t.Errorf("got %d creations, errors %v; want none and one error (ErrChunksMissing: %v)", len(got), errs, tt.wantMissing)
			}
		})
	}
}

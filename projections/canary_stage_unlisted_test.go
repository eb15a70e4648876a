package projections_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// labAPI builds events of Deployment lab/api: mk any event, tr a rollout
// transition of its revision u1 generation 1 (1-abcdef12).
func labAPI(t *testing.T) (mk func(events.Data) events.Event, tr func(events.Type, events.RolloutTransition) events.Event) {
	dep := events.Keys{Namespace: "lab", Name: "api"}
	mk = func(d events.Data) events.Event {
		t.Helper()
		ev, err := events.New(dep, d)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	tr = func(typ events.Type, d events.RolloutTransition) events.Event {
		t.Helper()
		d.UID, d.Generation, d.RevisionID = "u1", 1, "1-abcdef12"
		return mk(events.NewRolloutTransition(typ, d))
	}
	return mk, tr
}

// longIDs returns n device ids of 63 characters, the longest a device id
// may be: 8,000 of them are more than one event lists (events.ChunkBytes).
func longIDs(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%s-%06d", prefix, strings.Repeat("x", 55-len(prefix)), i)
	}
	return out
}

// A canary set too long for one event (issue #39: some 7,500 ids of 64
// characters) is handed the revision by a canary stage that lists none:
// the runner leaves the list out, and readers hand the revision to every
// frozen canary not removed before the stage, which is what the list would
// have said. Whatever the order the intent and rollout streams are folded
// in, and across a checkpoint, the values are those of the listed stage.
func TestACanaryStageWithoutAListHandsTheRevisionToEveryFrozenCanaryNotRemovedBefore(t *testing.T) {
	mk, tr := labAPI(t)
	canaries := longIDs("canary", 8000)
	rest := longIDs("rest", 50)
	targets := append(slices.Clone(canaries), rest...)
	revision := mk(events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "1-abcdef12", ScoreDigest: "sha256:00",
		Score: []byte(`{}`), Targets: targets, Canaries: canaries})
	removedBefore := tr(events.TypeRolloutTargetRemoved, events.RolloutTransition{Device: canaries[7], Error: "Device quarantined"})
	removedAfter := tr(events.TypeRolloutTargetRemoved, events.RolloutTransition{Device: canaries[9], Error: "Device deleted"})
	listed := tr(events.TypeRolloutCanaryStage, events.RolloutTransition{Released: slices.Delete(slices.Clone(canaries), 7, 8)})
	unlisted := tr(events.TypeRolloutCanaryStage, events.RolloutTransition{})
	if b, _ := listed.Marshal(); len(b) <= events.ChunkBytes {
		t.Fatalf("the listed canary stage is %d bytes: the test needs one over %d", len(b), events.ChunkBytes)
	}

	values := func(in *projections.Intent) map[string]string {
		out := map[string]string{}
		for _, d := range in.Devices() {
			if v, ok := in.Value(d); ok {
				out[d] = string(v)
			}
		}
		return out
	}
	fold := func(evs ...events.Event) *projections.Intent {
		in := projections.NewIntent()
		for _, ev := range evs {
			in.Apply(ev)
		}
		return in
	}
	checkpointed := func(before, after []events.Event) *projections.Intent {
		in := fold(before...)
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		restored := projections.NewIntent()
		if err := json.Unmarshal(b, restored); err != nil {
			t.Fatal(err)
		}
		for _, ev := range after {
			restored.Apply(ev)
		}
		return restored
	}
	// What the listed stage gives: every canary but the one removed before
	// it; none of the rest.
	want := values(fold(revision, removedBefore, listed, removedAfter))
	if len(want) != len(canaries)-1 {
		t.Fatalf("the listed stage hands %d devices the revision, want %d", len(want), len(canaries)-1)
	}
	for _, tt := range []struct {
		name string
		got  *projections.Intent
	}{
		{"the revision, then the stage without a list", fold(revision, removedBefore, unlisted, removedAfter)},
		{"the stage folded before the revision (the rollout stream read first)", fold(removedBefore, unlisted, removedAfter, revision)},
		{"a checkpoint between the revision and the stage", checkpointed([]events.Event{revision, removedBefore}, []events.Event{unlisted, removedAfter})},
		{"a checkpoint between the stage and the revision", checkpointed([]events.Event{removedBefore, unlisted}, []events.Event{removedAfter, revision})},
		{"a checkpoint after everything", checkpointed([]events.Event{revision, removedBefore, unlisted, removedAfter}, nil)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(want, values(tt.got)); diff != "" {
				t.Errorf("values differ from the listed stage's (-listed +unlisted):\n%.2000s", diff)
			}
		})
	}
}

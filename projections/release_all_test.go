package projections_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

func TestAReleaseWithoutAListHandsTheRevisionToEveryTargetNotRemovedBefore(t *testing.T) {
	mk, tr := labAPI(t)
	in := projections.NewIntent()
	for _, ev := range []events.Event{
		mk(events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "1-abcdef12", ScoreDigest: "sha256:00", Score: []byte(`{}`),
			Targets: []string{"a", "b", "c", "d"}, Canaries: []string{"a"}}),
		tr(events.TypeRolloutCanaryStage, events.RolloutTransition{Released: []string{"a"}}),
		tr(events.TypeRolloutTargetRemoved, events.RolloutTransition{Device: "b", Error: "Device quarantined"}),
		tr(events.TypeRolloutReleased, events.RolloutTransition{}), // the rest did not fit in one event
		tr(events.TypeRolloutTargetRemoved, events.RolloutTransition{Device: "d", Error: "Device deleted"}),
	} {
		in.Apply(ev)
	}
	if got, want := in.Devices(), []string{"a", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("devices with intent %v, want %v (b was removed before the release)", got, want)
	}
	// A checkpoint keeps it.
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	restored := projections.NewIntent()
	if err := json.Unmarshal(b, restored); err != nil {
		t.Fatal(err)
	}
	if got, want := restored.Devices(), in.Devices(); !slices.Equal(got, want) {
		t.Errorf("restored devices with intent %v, want %v", got, want)
	}
}

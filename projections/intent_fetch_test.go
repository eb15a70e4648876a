package projections_test

import (
	"encoding/json"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// prefetchRev is revEv of a Deployment with spec.rollout.prefetch.
func prefetchRev(t *testing.T, uid string, gen int64, targets, canaries []string) events.Event {
	return mustNew(t, dep, events.DeploymentRevisionCreated{UID: uid, Generation: gen, RevisionID: "r" + string(rune('0'+gen)),
		ScoreDigest: "sha256:x", Score: json.RawMessage(`{"type":"PodmanV0"}`), Targets: targets, Canaries: canaries, Prefetch: true})
}

// fetching maps device → generation its value offers to fetch.
func fetching(t *testing.T, s *projections.Intent) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, d := range s.Devices() {
		b, ok := s.Value(d)
		if !ok {
			continue
		}
		var v projections.DeviceIntent
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		for _, e := range v.Fetch {
			out[d] = e.Generation
		}
	}
	return out
}

func TestFetchAheadEntries(t *testing.T) {
	tests := []struct {
		name     string
		evs      func(t *testing.T) []events.Event
		fetch    map[string]int64
		deployed map[string]int64
	}{
		{"a revision without prefetch offers nothing to fetch", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a", "b"}, nil)}
		}, map[string]int64{}, map[string]int64{}},
		{"a prefetch revision offers every frozen target its images at once", func(t *testing.T) []events.Event {
			return []events.Event{prefetchRev(t, "u", 1, []string{"a", "b", "c"}, []string{"a"})}
		}, map[string]int64{"a": 1, "b": 1, "c": 1}, map[string]int64{}},
		{"a target handed the revision no longer fetches it", func(t *testing.T) []events.Event {
			return []events.Event{prefetchRev(t, "u", 1, []string{"a", "b", "c"}, []string{"a"}), relEv(t, events.TypeRolloutCanaryStage, "u", 1, "a")}
		}, map[string]int64{"b": 1, "c": 1}, map[string]int64{"a": 1}},
		{"a release to every target ends every fetch", func(t *testing.T) []events.Event {
			return []events.Event{prefetchRev(t, "u", 1, []string{"a", "b"}, []string{"a"}), relEv(t, events.TypeRolloutCanaryStage, "u", 1, "a"),
				relEv(t, events.TypeRolloutReleased, "u", 1)}
		}, map[string]int64{}, map[string]int64{"a": 1, "b": 1}},
		{"a device keeps running the old revision while it fetches the new one", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a", "b"}, nil), relEv(t, events.TypeRolloutReleased, "u", 1),
				prefetchRev(t, "u", 2, []string{"a", "b"}, []string{"a"})}
		}, map[string]int64{"a": 2, "b": 2}, map[string]int64{"a": 1, "b": 1}},
		{"a newer revision without prefetch ends the fetch of the older one", func(t *testing.T) []events.Event {
			return []events.Event{prefetchRev(t, "u", 1, []string{"a", "b"}, nil), revEv(t, "u", 2, []string{"a", "b"}, nil)}
		}, map[string]int64{}, map[string]int64{}},
		{"a removed target stops fetching", func(t *testing.T) []events.Event {
			return []events.Event{prefetchRev(t, "u", 1, []string{"a", "b"}, nil),
				mustNew(t, dep, events.NewRolloutTransition(events.TypeRolloutTargetRemoved, events.RolloutTransition{UID: "u", Generation: 1, Device: "b"}))}
		}, map[string]int64{"a": 1}, map[string]int64{}},
		{"a deleted Deployment offers nothing to fetch", func(t *testing.T) []events.Event {
			return []events.Event{prefetchRev(t, "u", 1, []string{"a", "b"}, nil), delEv(t, "u", 1)}
		}, map[string]int64{}, map[string]int64{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := projections.NewIntent()
			for _, ev := range tc.evs(t) {
				s.Apply(ev)
			}
			if diff := cmp.Diff(tc.fetch, fetching(t, s)); diff != "" {
				t.Errorf("fetch entries (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.deployed, state(s)); diff != "" {
				t.Errorf("deployments (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAFetchEntryHasTheRevisionsScoreAndNoSwitch(t *testing.T) {
	s := projections.NewIntent()
	s.Apply(prefetchRev(t, "u", 1, []string{"a"}, nil))
	v, _ := s.Value("a")
	want := `{"device":"a","deployments":[],"fetch":[{"namespace":"lab","name":"api","uid":"u","generation":1,"revisionId":"r1","score":{"type":"PodmanV0"}}]}`
	if diff := cmp.Diff(want, string(v)); diff != "" {
		t.Errorf("fleet-intent value (-want +got):\n%s", diff)
	}
}

func TestFetchEntriesIgnoreHowStreamsInterleave(t *testing.T) {
	intent := []events.Event{revEv(t, "u", 1, []string{"a", "b", "c"}, nil), prefetchRev(t, "u", 2, []string{"a", "b", "c"}, []string{"a"})}
	rollout := []events.Event{relEv(t, events.TypeRolloutReleased, "u", 1, "a", "b", "c"), relEv(t, events.TypeRolloutCanaryStage, "u", 2, "a"),
		mustNew(t, dep, events.NewRolloutTransition(events.TypeRolloutTargetRemoved, events.RolloutTransition{UID: "u", Generation: 2, Device: "c"}))}
	values := func(s *projections.Intent) map[string]string {
		out := map[string]string{}
		for _, d := range []string{"a", "b", "c"} {
			if b, ok := s.Value(d); ok {
				out[d] = string(b)
			}
		}
		return out
	}
	inOrder := projections.NewIntent()
	for _, ev := range []events.Event{intent[0], rollout[0], intent[1], rollout[1], rollout[2]} {
		inOrder.Apply(ev)
	}
	want := values(inOrder)
	if diff := cmp.Diff(map[string]int64{"b": 2}, fetching(t, inOrder)); diff != "" {
		t.Fatalf("in-order fetch entries (-want +got):\n%s", diff)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 200 {
		s := projections.NewIntent()
		ii, ri := 0, 0
		for ii < len(intent) || ri < len(rollout) {
			if ri == len(rollout) || (ii < len(intent) && rng.IntN(2) == 0) {
				s.Apply(intent[ii])
				ii++
			} else {
				s.Apply(rollout[ri])
				ri++
			}
		}
		if diff := cmp.Diff(want, values(s)); diff != "" {
			t.Fatalf("interleaving %d differs (-in order +this):\n%s", i, diff)
		}
	}
}

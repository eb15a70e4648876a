package projections_test

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

var dep = events.Keys{Namespace: "lab", Name: "api"}

func revEv(t *testing.T, uid string, gen int64, targets, canaries []string) events.Event {
	return mustNew(t, dep, events.DeploymentRevisionCreated{UID: uid, Generation: gen, RevisionID: "r" + string(rune('0'+gen)),
		ScoreDigest: "sha256:x", Score: json.RawMessage(`{"type":"PodmanV0"}`), Targets: targets, Canaries: canaries})
}

func relEv(t *testing.T, typ events.Type, uid string, gen int64, devices ...string) events.Event {
	return mustNew(t, dep, events.NewRolloutTransition(typ, events.RolloutTransition{UID: uid, Generation: gen, Released: devices}))
}

func delEv(t *testing.T, uid string, gen int64) events.Event {
	return mustNew(t, dep, events.DeploymentDeleted{UID: uid, Generation: gen})
}

// state maps device → generation it must run (0: no key).
func state(s *projections.Intent) map[string]int64 {
	out := map[string]int64{}
	for _, d := range s.Devices() {
		b, ok := s.Value(d)
		if !ok {
			continue
		}
		var v projections.DeviceIntent
		if err := json.Unmarshal(b, &v); err != nil {
			panic(err)
		}
		for _, e := range v.Deployments {
			out[d] = e.Generation
		}
	}
	return out
}

func TestIntentProjection(t *testing.T) {
	tests := []struct {
		name string
		evs  func(t *testing.T) []events.Event
		want map[string]int64
	}{
		{"nothing is written before the revision is released", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a", "b"}, nil)}
		}, map[string]int64{}},
		{"canaries get the revision at the canary stage, the rest only on release", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a", "b"}, []string{"a"}), relEv(t, events.TypeRolloutCanaryStage, "u", 1, "a")}
		}, map[string]int64{"a": 1}},
		{"released targets all get the revision", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a", "b"}, []string{"a"}), relEv(t, events.TypeRolloutCanaryStage, "u", 1, "a"),
				relEv(t, events.TypeRolloutReleased, "u", 1, "b")}
		}, map[string]int64{"a": 1, "b": 1}},
		{"a new revision leaves the old one in place until it is released to the device", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a", "b"}, nil), relEv(t, events.TypeRolloutReleased, "u", 1, "a", "b"),
				revEv(t, "u", 2, []string{"a", "b"}, []string{"a"}), relEv(t, events.TypeRolloutCanaryStage, "u", 2, "a")}
		}, map[string]int64{"a": 2, "b": 1}},
		{"a device a new revision no longer targets loses its entry", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a", "b"}, nil), relEv(t, events.TypeRolloutReleased, "u", 1, "a", "b"),
				revEv(t, "u", 2, []string{"a"}, nil)}
		}, map[string]int64{"a": 1}},
		{"deletion removes every entry and the keys", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a", "b"}, nil), relEv(t, events.TypeRolloutReleased, "u", 1, "a", "b"), delEv(t, "u", 1)}
		}, map[string]int64{}},
		{"a Deployment recreated after deletion deploys again", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a"}, nil), relEv(t, events.TypeRolloutReleased, "u", 1, "a"), delEv(t, "u", 1),
				revEv(t, "v", 1, []string{"a"}, nil), relEv(t, events.TypeRolloutReleased, "v", 1, "a")}
		}, map[string]int64{"a": 1}},
		{"a failed canary stage never writes the non-canaries' entries", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a", "b", "c"}, []string{"a"}), relEv(t, events.TypeRolloutCanaryStage, "u", 1, "a"),
				relEv(t, events.TypeRolloutCanaryFailed, "u", 1), relEv(t, events.TypeRolloutFailed, "u", 1)}
		}, map[string]int64{"a": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := projections.NewIntent()
			for _, ev := range tc.evs(t) {
				s.Apply(ev)
			}
			if diff := cmp.Diff(tc.want, state(s)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestIntentIgnoresHowStreamsInterleave folds the same intent and rollout
// histories in many interleavings (each stream in its own order) and expects
// byte-identical values every time.
func TestIntentIgnoresHowStreamsInterleave(t *testing.T) {
	intent := []events.Event{revEv(t, "u", 1, []string{"a", "b", "c"}, []string{"a"}), revEv(t, "u", 2, []string{"a", "b"}, []string{"b"})}
	rollout := []events.Event{relEv(t, events.TypeRolloutCanaryStage, "u", 1, "a"), relEv(t, events.TypeRolloutReleased, "u", 1, "b", "c"),
		relEv(t, events.TypeRolloutCanaryStage, "u", 2, "b")}
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
	for _, ev := range []events.Event{intent[0], rollout[0], rollout[1], intent[1], rollout[2]} {
		inOrder.Apply(ev)
	}
	want := values(inOrder)
	if got := state(inOrder); !cmp.Equal(got, map[string]int64{"a": 1, "b": 2}) {
		t.Fatalf("in-order state %v", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
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

func TestHoldsIsExactlyTheRevisionTheDeviceWasHanded(t *testing.T) {
	s := projections.NewIntent()
	for _, ev := range []events.Event{revEv(t, "u", 1, []string{"a", "b"}, nil), relEv(t, events.TypeRolloutReleased, "u", 1, "a", "b"),
		revEv(t, "u", 2, []string{"a", "b"}, []string{"a"}), relEv(t, events.TypeRolloutCanaryStage, "u", 2, "a")} {
		s.Apply(ev)
	}
	tests := []struct {
		name                 string
		device, ns, dep, uid string
		gen                  int64
		want                 bool
	}{
		{"the canary holds the new revision", "a", "lab", "api", "u", 2, true},
		{"the canary no longer holds the old one", "a", "lab", "api", "u", 1, false},
		{"a device not yet handed the new one holds the old one", "b", "lab", "api", "u", 1, true},
		{"a device not yet handed the new one does not hold it", "b", "lab", "api", "u", 2, false},
		{"a device that is no target holds nothing", "c", "lab", "api", "u", 1, false},
		{"another uid is not held", "a", "lab", "api", "v", 2, false},
		{"another Deployment is not held", "a", "lab", "web", "u", 2, false},
		{"another namespace is not held", "a", "ops", "api", "u", 2, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := s.Holds(tc.device, tc.ns, tc.dep, tc.uid, tc.gen); got != tc.want {
				t.Errorf("Holds = %v, want %v", got, tc.want)
			}
		})
	}
	s.Apply(delEv(t, "u", 2))
	if s.Holds("b", "lab", "api", "u", 1) {
		t.Error("a deleted Deployment is still held")
	}
}

func TestMinReadySecondsReachesTheIntentEntryOnlyWhenSet(t *testing.T) {
	for _, tc := range []struct {
		name     string
		minReady int64
		want     string
	}{
		{"a revision without minReady writes the value as before", 0, `{"device":"a","deployments":[{"namespace":"lab","name":"api","uid":"u","generation":1,"revisionId":"r1","scoreDigest":"sha256:x","score":{"type":"PodmanV0"}}]}`},
		{"a revision with minReady copies it", 30, `{"device":"a","deployments":[{"namespace":"lab","name":"api","uid":"u","generation":1,"revisionId":"r1","scoreDigest":"sha256:x","score":{"type":"PodmanV0"},"minReadySeconds":30}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := projections.NewIntent()
			s.Apply(mustNew(t, dep, events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "r1", ScoreDigest: "sha256:x",
				Score: json.RawMessage(`{"type":"PodmanV0"}`), Targets: []string{"a"}, Canaries: []string{}, MinReadySeconds: tc.minReady}))
			s.Apply(relEv(t, events.TypeRolloutReleased, "u", 1, "a"))
			v, _ := s.Value("a")
			if diff := cmp.Diff(tc.want, string(v)); diff != "" {
				t.Errorf("fleet-intent value (-want +got):\n%s", diff)
			}
		})
	}
}

func TestASignaturePolicyReachesTheIntentEntryOnlyWhenSet(t *testing.T) {
	before := `{"device":"a","deployments":[{"namespace":"lab","name":"api","uid":"u","generation":1,"revisionId":"r1","scoreDigest":"sha256:x","score":{"type":"PodmanV0"}}]}`
	for _, tc := range []struct {
		name   string
		policy *events.SignaturePolicy
		want   string
	}{
		{"a revision without a policy writes the value as before", nil, before},
		{"a revision with a policy copies its keys", &events.SignaturePolicy{Keys: []events.SignatureKey{{Name: "ci", PublicKey: "PEM"}}},
			strings.TrimSuffix(before, "}]}") + `,"signatures":{"keys":[{"name":"ci","publicKey":"PEM"}]}}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := projections.NewIntent()
			s.Apply(mustNew(t, dep, events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "r1", ScoreDigest: "sha256:x",
				Score: json.RawMessage(`{"type":"PodmanV0"}`), Targets: []string{"a"}, Canaries: []string{}, Signatures: tc.policy}))
			s.Apply(relEv(t, events.TypeRolloutReleased, "u", 1, "a"))
			v, _ := s.Value("a")
			if diff := cmp.Diff(tc.want, string(v)); diff != "" {
				t.Errorf("fleet-intent value (-want +got):\n%s", diff)
			}
		})
	}
}

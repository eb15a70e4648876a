package projections_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

func taskCreated(t *testing.T, name, uid, task string, targets ...string) events.Event {
	d := events.TaskRunCreated{UID: uid, Generation: 1, Task: task, Targets: targets}
	if task == events.TaskAgentUpgrade {
		d.Agent = &events.AgentArtifact{URL: "https://example.com/agent", SHA256: "ab", Version: "v2"}
	}
	return mustNew(t, events.Keys{Namespace: "lab", Name: name}, d)
}

func taskDeleted(t *testing.T, name, uid string) events.Event {
	return mustNew(t, events.Keys{Namespace: "lab", Name: name}, events.TaskRunDeleted{UID: uid})
}

// entries maps device → "deployment@gen" and "task:<taskrun>/<uid>" entries.
func entries(t *testing.T, s *projections.Intent) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, d := range s.Devices() {
		b, ok := s.Value(d)
		if !ok {
			t.Errorf("device %s listed without a value", d)
			continue
		}
		var v projections.DeviceIntent
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		if v.Deployments == nil {
			t.Errorf("device %s: deployments is null, want a list", d)
		}
		for _, e := range v.Deployments {
			out[d] = append(out[d], e.Name+"@"+string(rune('0'+e.Generation)))
		}
		for _, e := range v.Tasks {
			out[d] = append(out[d], "task:"+e.TaskRun+"/"+e.UID+"/"+e.Task)
		}
	}
	return out
}

func TestIntentTaskEntries(t *testing.T) {
	tests := []struct {
		name string
		evs  func(t *testing.T) []events.Event
		want map[string][]string
	}{
		{"a TaskRun puts its task on each frozen target", func(t *testing.T) []events.Event {
			return []events.Event{taskCreated(t, "upgrade", "t1", events.TaskSystemUpgrade, "a", "b")}
		}, map[string][]string{"a": {"task:upgrade/t1/system-upgrade"}, "b": {"task:upgrade/t1/system-upgrade"}}},
		{"a Deployment rollout and a TaskRun on one device both keep their entries, in either order", func(t *testing.T) []events.Event {
			return []events.Event{taskCreated(t, "upgrade", "t1", events.TaskSystemUpgrade, "a"),
				revEv(t, "u", 1, []string{"a"}, nil), relEv(t, events.TypeRolloutReleased, "u", 1, "a"),
				taskCreated(t, "agent", "t2", events.TaskAgentUpgrade, "a")}
		}, map[string][]string{"a": {"api@1", "task:agent/t2/agent-upgrade", "task:upgrade/t1/system-upgrade"}}},
		{"deleting the TaskRun takes its task out and leaves the Deployment", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a"}, nil), relEv(t, events.TypeRolloutReleased, "u", 1, "a"),
				taskCreated(t, "upgrade", "t1", events.TaskSystemUpgrade, "a", "b"), taskDeleted(t, "upgrade", "t1")}
		}, map[string][]string{"a": {"api@1"}}},
		{"deleting the Deployment leaves the task", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a"}, nil), relEv(t, events.TypeRolloutReleased, "u", 1, "a"),
				taskCreated(t, "upgrade", "t1", events.TaskSystemUpgrade, "a"), delEv(t, "u", 1)}
		}, map[string][]string{"a": {"task:upgrade/t1/system-upgrade"}}},
		{"a TaskRun named like a Deployment is another entry", func(t *testing.T) []events.Event {
			return []events.Event{revEv(t, "u", 1, []string{"a"}, nil), relEv(t, events.TypeRolloutReleased, "u", 1, "a"),
				taskCreated(t, "api", "t1", events.TaskSystemUpgrade, "a")}
		}, map[string][]string{"a": {"api@1", "task:api/t1/system-upgrade"}}},
		{"a TaskRun recreated under its name runs again under its new UID", func(t *testing.T) []events.Event {
			return []events.Event{taskCreated(t, "upgrade", "t1", events.TaskSystemUpgrade, "a"), taskDeleted(t, "upgrade", "t1"),
				taskCreated(t, "upgrade", "t2", events.TaskSystemUpgrade, "a")}
		}, map[string][]string{"a": {"task:upgrade/t2/system-upgrade"}}},
		{"a deletion folded before its creation still wins", func(t *testing.T) []events.Event {
			return []events.Event{taskDeleted(t, "upgrade", "t1"), taskCreated(t, "upgrade", "t1", events.TaskSystemUpgrade, "a")}
		}, map[string][]string{}},
		{"a TaskRun without targets writes nothing", func(t *testing.T) []events.Event {
			return []events.Event{taskCreated(t, "upgrade", "t1", events.TaskSystemUpgrade)}
		}, map[string][]string{}},
		{"a duplicate creation changes nothing", func(t *testing.T) []events.Event {
			return []events.Event{taskCreated(t, "upgrade", "t1", events.TaskSystemUpgrade, "a"), taskCreated(t, "upgrade", "t1", events.TaskSystemUpgrade, "b")}
		}, map[string][]string{"a": {"task:upgrade/t1/system-upgrade"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := projections.NewIntent()
			for _, ev := range tc.evs(t) {
				s.Apply(ev)
			}
			if diff := cmp.Diff(tc.want, entries(t, s)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			t.Run("a snapshot restores the same values", func(t *testing.T) {
				b, err := json.Marshal(s)
				if err != nil {
					t.Fatal(err)
				}
				r := projections.NewIntent()
				if err := json.Unmarshal(b, r); err != nil {
					t.Fatal(err)
				}
				for _, d := range s.Devices() {
					want, _ := s.Value(d)
					got, _ := r.Value(d)
					if string(want) != string(got) {
						t.Errorf("device %s: restored %s, want %s", d, got, want)
					}
				}
				if !cmp.Equal(s.Devices(), r.Devices()) {
					t.Errorf("restored devices %v, want %v", r.Devices(), s.Devices())
				}
			})
		})
	}
}

func TestAnIntentSnapshotOfAnEarlierBuildStillRestores(t *testing.T) {
	s := projections.NewIntent()
	s.Apply(revEv(t, "u", 1, []string{"a"}, nil))
	s.Apply(relEv(t, events.TypeRolloutReleased, "u", 1, "a"))
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var snap struct {
		Deployments json.RawMessage `json:"deployments"`
	}
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatal(err)
	}
	r := projections.NewIntent()
	if err := json.Unmarshal(snap.Deployments, r); err != nil { // the bare list earlier builds wrote
		t.Fatal(err)
	}
	want, _ := s.Value("a")
	if got, _ := r.Value("a"); string(got) != string(want) {
		t.Errorf("restored %s, want %s", got, want)
	}
}

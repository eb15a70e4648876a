package projections_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

func foldRecord(t *testing.T, seq uint64, keys events.Keys, d events.Data) events.Record {
	t.Helper()
	return events.Record{Event: mustNew(t, keys, d), Sequence: seq}
}

var upgrade = projections.TaskRunKey{Namespace: "lab", Name: "upgrade"}

// The TaskRun fold: records in, status out.

func createdRecord(t *testing.T, uid string, targets ...string) events.Record {
	t.Helper()
	r := foldRecord(t, 1, events.Keys{Namespace: "lab", Name: "upgrade"}, events.TaskRunCreated{UID: uid, Generation: 1,
		Task: events.TaskSystemUpgrade, Targets: targets})
	r.Stored = time.Unix(100, 0)
	return r
}

func taskRecord(t *testing.T, device, uid, phase string) events.Record {
	t.Helper()
	r := foldRecord(t, 1, events.Keys{Device: device}, events.TaskStatus{Namespace: "lab", TaskRun: "upgrade", UID: uid,
		Task: events.TaskSystemUpgrade, Phase: phase, Error: map[bool]string{true: "boom"}[phase == events.TaskFailed], Since: time.Unix(200, 0)})
	r.Stored = time.Unix(200, 0)
	return r
}

func TestTheTaskRunFold(t *testing.T) {
	type step struct {
		intent bool
		rec    events.Record
	}
	tests := []struct {
		name        string
		steps       func(t *testing.T) []step
		wantPhase   fleetv1.TaskRunPhase
		wantCounts  fleetv1.TaskRunCounts
		wantIgnored uint64
	}{
		{"a TaskRun nobody reported on is Pending", func(t *testing.T) []step {
			return []step{{true, createdRecord(t, "u", "a", "b")}}
		}, fleetv1.TaskRunPending, fleetv1.TaskRunCounts{Targets: 2, Pending: 2}, 0},
		{"one target Running makes it Running", func(t *testing.T) []step {
			return []step{{true, createdRecord(t, "u", "a", "b")}, {false, taskRecord(t, "a", "u", events.TaskRunning)}}
		}, fleetv1.TaskRunRunning, fleetv1.TaskRunCounts{Targets: 2, Pending: 1, Running: 1}, 0},
		{"one result and one target not started is Running", func(t *testing.T) []step {
			return []step{{true, createdRecord(t, "u", "a", "b")}, {false, taskRecord(t, "a", "u", events.TaskSucceeded)}}
		}, fleetv1.TaskRunRunning, fleetv1.TaskRunCounts{Targets: 2, Pending: 1, Succeeded: 1}, 0},
		{"every target succeeded is Succeeded", func(t *testing.T) []step {
			return []step{{true, createdRecord(t, "u", "a", "b")}, {false, taskRecord(t, "a", "u", events.TaskSucceeded)},
				{false, taskRecord(t, "b", "u", events.TaskSucceeded)}}
		}, fleetv1.TaskRunSucceeded, fleetv1.TaskRunCounts{Targets: 2, Succeeded: 2}, 0},
		{"all finished with one failure is Failed", func(t *testing.T) []step {
			return []step{{true, createdRecord(t, "u", "a", "b")}, {false, taskRecord(t, "a", "u", events.TaskFailed)},
				{false, taskRecord(t, "b", "u", events.TaskSucceeded)}}
		}, fleetv1.TaskRunFailed, fleetv1.TaskRunCounts{Targets: 2, Succeeded: 1, Failed: 1}, 0},
		{"no target is Failed, never Succeeded", func(t *testing.T) []step {
			return []step{{true, createdRecord(t, "u")}}
		}, fleetv1.TaskRunFailed, fleetv1.TaskRunCounts{}, 0},
		{"a report from a device that is no target is ignored", func(t *testing.T) []step {
			return []step{{true, createdRecord(t, "u", "a")}, {false, taskRecord(t, "x", "u", events.TaskFailed)}}
		}, fleetv1.TaskRunPending, fleetv1.TaskRunCounts{Targets: 1, Pending: 1}, 1},
		{"a report of another UID of the same name is ignored once that UID is known", func(t *testing.T) []step {
			return []step{{true, createdRecord(t, "old", "a")}, {true, foldRecord(t, 2, events.Keys{Namespace: "lab", Name: "upgrade"}, events.TaskRunDeleted{UID: "old"})},
				{true, createdRecord(t, "u", "a")}, {false, taskRecord(t, "a", "old", events.TaskFailed)}}
		}, fleetv1.TaskRunPending, fleetv1.TaskRunCounts{Targets: 1, Pending: 1}, 1},
		{"an unknown phase is ignored", func(t *testing.T) []step {
			return []step{{true, createdRecord(t, "u", "a")}, {false, taskRecord(t, "a", "u", "Exploded")}}
		}, fleetv1.TaskRunPending, fleetv1.TaskRunCounts{Targets: 1, Pending: 1}, 1},
		{"a report after the device's result is ignored", func(t *testing.T) []step {
			return []step{{true, createdRecord(t, "u", "a")}, {false, taskRecord(t, "a", "u", events.TaskFailed)},
				{false, taskRecord(t, "a", "u", events.TaskSucceeded)}}
		}, fleetv1.TaskRunFailed, fleetv1.TaskRunCounts{Targets: 1, Failed: 1}, 1},
		{"a report folded before its TaskRun's creation counts once the creation comes", func(t *testing.T) []step {
			return []step{{false, taskRecord(t, "a", "u", events.TaskSucceeded)}, {true, createdRecord(t, "u", "a")}}
		}, fleetv1.TaskRunSucceeded, fleetv1.TaskRunCounts{Targets: 1, Succeeded: 1}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := projections.NewTaskRuns()
			for _, s := range tc.steps(t) {
				var err error
				if s.intent {
					err = f.ApplyIntent(s.rec)
				} else {
					_, err = f.ApplyReport(s.rec)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			st, ok := f.Status(upgrade)
			if !ok {
				t.Fatal("no TaskRun state")
			}
			if st.Phase != tc.wantPhase {
				t.Errorf("phase %s, want %s", st.Phase, tc.wantPhase)
			}
			if diff := cmp.Diff(tc.wantCounts, st.Counts); diff != "" {
				t.Errorf("counts (-want +got):\n%s", diff)
			}
			if f.Ignored() != tc.wantIgnored {
				t.Errorf("ignored %d, want %d", f.Ignored(), tc.wantIgnored)
			}
		})
	}
}

func TestTaskRunResultsAreOmittedAboveTheBound(t *testing.T) {
	var targets []string
	for i := range fleetv1.MaxTaskRunResults + 1 {
		targets = append(targets, string(rune('a'+i/26))+string(rune('a'+i%26)))
	}
	f := projections.NewTaskRuns()
	if err := f.ApplyIntent(createdRecord(t, "u", targets...)); err != nil {
		t.Fatal(err)
	}
	st, _ := f.Status(upgrade)
	if st.Results != nil || st.Counts.Targets != int32(len(targets)) {
		t.Errorf("results %d, counts %+v: want none above %d targets", len(st.Results), st.Counts, fleetv1.MaxTaskRunResults)
	}
	if got := f.Results(upgrade); len(got) != len(targets) {
		t.Errorf("Results gives %d rows, want every target (%d)", len(got), len(targets))
	}
}

// TestADevicesTaskTextIsWrittenEscapedIntoTheTaskRunStatus: a device's
// task error and agent version reach the TaskRun status (result and latest
// failure) with hidden characters escaped and line feeds kept.
func TestADevicesTaskTextIsWrittenEscapedIntoTheTaskRunStatus(t *testing.T) {
	f := projections.NewTaskRuns()
	if err := f.ApplyIntent(createdRecord(t, "u", "a")); err != nil {
		t.Fatal(err)
	}
	r := foldRecord(t, 2, events.Keys{Device: "a"}, events.TaskStatus{Namespace: "lab", TaskRun: "upgrade", UID: "u",
		Task: events.TaskSystemUpgrade, Phase: events.TaskFailed, Error: "dpkg: error\n\u202elibc6", AgentVersion: "v1\u200b.2", Since: time.Unix(200, 0)})
	r.Stored = time.Unix(200, 0)
	if _, err := f.ApplyReport(r); err != nil {
		t.Fatal(err)
	}
	st, ok := f.Status(upgrade)
	if !ok || len(st.Results) != 1 || st.LatestFailure == nil {
		t.Fatalf("status %+v", st)
	}
	wantMsg := "dpkg: error\n" + `\u202elibc6`
	if got := st.Results[0]; got.Message != wantMsg || got.AgentVersion != `v1\u200b.2` {
		t.Errorf("result message %q, agent version %q; want %q, %q", got.Message, got.AgentVersion, wantMsg, `v1\u200b.2`)
	}
	if st.LatestFailure.Message != wantMsg {
		t.Errorf("latest failure %q, want %q", st.LatestFailure.Message, wantMsg)
	}
}

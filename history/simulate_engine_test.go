package history

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// TestTheSimulatorFollowsThePlansControls runs the simulator on a model of
// fixed answers (every device converges 10 s after it is handed the
// revision, d6 fails after 5 s) and checks the stage times each control
// gives: a disruption budget's waves, a soak, an approval's delay, a
// failure that pauses and a silent device the target timeout removes.
func TestTheSimulatorFollowsThePlansControls(t *testing.T) {
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	model := func(silent string) *simModel {
		m := &simModel{byDevice: map[string][]simSample{}}
		for _, d := range []string{"d1", "d2", "d3", "d4", "d5", "d6"} {
			s := simSample{dur: 10 * time.Second, outcome: events.WorkloadConverged}
			switch d {
			case silent:
				s = simSample{dur: time.Hour}
			case "d6":
				s = simSample{dur: 5 * time.Second, outcome: events.WorkloadFailed}
			}
			m.add(d, s)
		}
		return m
	}
	rev := func(plan *events.RolloutPlan, batches, groups []int) events.DeploymentRevisionCreated {
		return events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "1-u", Score: json.RawMessage(`{}`),
			Targets: []string{"d1", "d2", "d3", "d4", "d5", "d6"}, Canaries: []string{"d1"}, Plan: plan, TargetBatches: batches, TargetGroups: groups}
	}
	s := func(d time.Duration) time.Time { return start.Add(d) }
	tests := []struct {
		name   string
		rev    events.DeploymentRevisionCreated
		silent string
		o      SimulateOptions
		end    string
		stages []SimStage
	}{
		{"a budget of one per group hands a batch in waves",
			rev(&events.RolloutPlan{Batches: []events.PlanBatch{{Size: 5, SuccessPercent: 50}},
				Budget: &events.DisruptionBudget{LabelKey: "site", MaxUnavailable: 1, Values: []string{"a", "b"}}}, []int{0, 1, 1, 1, 1, 1}, []int{0, 0, 0, 1, 1, 1}),
			"", SimulateOptions{}, "Succeeded",
			// d1 canary: 10 s. Batch 1: group a (d1, d2, d3) hands d2,
			// then d3; group b (d4, d5, d6) d4, then d5, then d6, whose
			// wave starts when the batch has its 3 of 5 converged.
			[]SimStage{{Name: "rollout", Start: s(0), End: s(30 * time.Second), Outcome: "succeeded"},
				{Name: "canary", Start: s(0), End: s(10 * time.Second), Outcome: "succeeded"},
				{Name: "batch 1", Start: s(10 * time.Second), End: s(30 * time.Second), Outcome: "succeeded"}}},
		{"a soak holds the batch, an approval comes after its delay",
			rev(&events.RolloutPlan{Approval: events.ApprovalManual, Batches: []events.PlanBatch{{Size: 2, SuccessPercent: 100, SoakSeconds: 60},
				{Size: 3, SuccessPercent: 50}}}, []int{0, 1, 1, 2, 2, 2}, nil),
			"", SimulateOptions{ApprovalDelay: 5 * time.Minute}, "Succeeded",
			[]SimStage{{Name: "rollout", Start: s(0), End: s(10*time.Second + 5*time.Minute + 70*time.Second + 5*time.Minute + 10*time.Second), Outcome: "succeeded"},
				{Name: "canary", Start: s(0), End: s(10 * time.Second), Outcome: "succeeded"},
				{Name: "batch 1", Start: s(10*time.Second + 5*time.Minute), End: s(10*time.Second + 5*time.Minute + 70*time.Second), Outcome: "succeeded"},
				{Name: "batch 2", Start: s(10*time.Second + 5*time.Minute + 70*time.Second + 5*time.Minute),
					End: s(10*time.Second + 5*time.Minute + 70*time.Second + 5*time.Minute + 10*time.Second), Outcome: "succeeded"}}},
		{"an approval that never comes halts it",
			rev(&events.RolloutPlan{Approval: events.ApprovalManual, Batches: []events.PlanBatch{{Size: 5, SuccessPercent: 100}}}, []int{0, 1, 1, 1, 1, 1}, nil),
			"", SimulateOptions{ApprovalDelay: -1}, "AwaitingApproval",
			[]SimStage{{Name: "rollout", Start: s(0)}, {Name: "canary", Start: s(0), End: s(10 * time.Second), Outcome: "succeeded"}}},
		{"a failed batch pauses",
			rev(&events.RolloutPlan{OnFailure: events.OnFailurePause, Batches: []events.PlanBatch{{Size: 5, SuccessPercent: 100}}}, []int{0, 1, 1, 1, 1, 1}, nil),
			"", SimulateOptions{}, "Paused",
			[]SimStage{{Name: "rollout", Start: s(0)}, {Name: "canary", Start: s(0), End: s(10 * time.Second), Outcome: "succeeded"},
				{Name: "batch 1", Start: s(10 * time.Second), End: s(15 * time.Second), Outcome: "failed"}}},
		{"a silent device exceeds the progress deadline and is removed after the target timeout",
			rev(nil, nil, nil), "d6", SimulateOptions{TargetTimeout: 30 * time.Minute}, "Succeeded",
			[]SimStage{{Name: "rollout", Start: s(0), End: s(30*time.Minute + 10*time.Second), Outcome: "succeeded"},
				{Name: "canary", Start: s(0), End: s(10 * time.Second), Outcome: "succeeded"},
				{Name: "release", Start: s(10 * time.Second), End: s(30*time.Minute + 10*time.Second), Outcome: "succeeded"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.Start = start
			p, err := simulateRevision("lab", "api", tc.rev, model(tc.silent), tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if p.End != tc.end {
				t.Errorf("ends %s, want %s; steps %+v", p.End, tc.end, p.Steps)
			}
			if tc.silent != "" {
				if diff := cmp.Diff([]time.Time{s(20*time.Second + DefaultSimProgressDeadline)}, p.DeadlineExceeded); diff != "" {
					t.Errorf("the progress deadline, 10 minutes after the last result, (-want +got):\n%s", diff)
				}
			}
			if tc.stages != nil {
				if diff := cmp.Diff(tc.stages, p.Stages); diff != "" {
					t.Errorf("stages (-want +got):\n%s", diff)
				}
			}
		})
	}
}

// TestTheSimulatorWaitsForTheMaintenanceWindow runs a plan without
// batches (one canary, then the release) on the same fixed answers (every
// device converges 10 s after it may switch) with a maintenance window
// (ADR 0029) read in UTC, the simulator's zone for every device: a window
// closed at the start makes the canary converge only 10 s after it opens,
// an open one changes nothing, and the wait, longer than the progress
// deadline and the target timeout, neither exceeds the one nor removes
// anyone.
func TestTheSimulatorWaitsForTheMaintenanceWindow(t *testing.T) {
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	s := func(d time.Duration) time.Time { return start.Add(d) }
	m := &simModel{byDevice: map[string][]simSample{}}
	for _, d := range []string{"d1", "d2", "d3"} {
		m.add(d, simSample{dur: 10 * time.Second, outcome: events.WorkloadConverged})
	}
	open := 2 * time.Hour // 02:00, two hours after the start
	tests := []struct {
		name    string
		window  *events.MaintenanceWindow
		stages  []SimStage
		waiting []SimStep // the steps that hand targets waiting for the window
	}{
		{"a window closed at the start makes every stage start converging at its opening",
			&events.MaintenanceWindow{Start: "02:00", Duration: "1h"},
			[]SimStage{{Name: "rollout", Start: s(0), End: s(open + 20*time.Second), Outcome: "succeeded"},
				{Name: "canary", Start: s(0), End: s(open + 10*time.Second), Outcome: "succeeded"},
				{Name: "release", Start: s(open + 10*time.Second), End: s(open + 20*time.Second), Outcome: "succeeded"}},
			[]SimStep{{Type: events.TypeRolloutCanaryStage, Handed: 1, WindowWaiting: 1, WindowOpens: s(open)}}},
		{"a window open at the start predicts what no window does",
			&events.MaintenanceWindow{Start: "23:00", Duration: "3h"},
			[]SimStage{{Name: "rollout", Start: s(0), End: s(20 * time.Second), Outcome: "succeeded"},
				{Name: "canary", Start: s(0), End: s(10 * time.Second), Outcome: "succeeded"},
				{Name: "release", Start: s(10 * time.Second), End: s(20 * time.Second), Outcome: "succeeded"}},
			nil},
		{"no window",
			nil,
			[]SimStage{{Name: "rollout", Start: s(0), End: s(20 * time.Second), Outcome: "succeeded"},
				{Name: "canary", Start: s(0), End: s(10 * time.Second), Outcome: "succeeded"},
				{Name: "release", Start: s(10 * time.Second), End: s(20 * time.Second), Outcome: "succeeded"}},
			nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rev := events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "1-u", Score: json.RawMessage(`{}`),
				Targets: []string{"d1", "d2", "d3"}, Canaries: []string{"d1"}, Window: tc.window}
			p, err := simulateRevision("lab", "api", rev, m, SimulateOptions{Start: start})
			if err != nil {
				t.Fatal(err)
			}
			if p.End != "Succeeded" {
				t.Errorf("ends %s, want Succeeded; steps %+v", p.End, p.Steps)
			}
			if diff := cmp.Diff(tc.stages, p.Stages); diff != "" {
				t.Errorf("stages (-want +got):\n%s", diff)
			}
			if len(p.DeadlineExceeded) > 0 {
				t.Errorf("the progress deadline was exceeded at %v while every pending target waited for its window", p.DeadlineExceeded)
			}
			var waiting []SimStep
			for _, st := range p.Steps {
				if st.Type == events.TypeRolloutTargetRemoved {
					t.Errorf("%s was removed at %s: the target timeout runs from the window's opening", st.Device, st.Time)
				}
				if st.WindowWaiting > 0 {
					waiting = append(waiting, SimStep{Type: st.Type, Handed: st.Handed, WindowWaiting: st.WindowWaiting, WindowOpens: st.WindowOpens})
				}
			}
			if diff := cmp.Diff(tc.waiting, waiting); diff != "" {
				t.Errorf("steps handing targets that wait for the window (-want +got):\n%s", diff)
			}
			wantNote := tc.window != nil
			if got := slices.ContainsFunc(p.Assumptions, func(a string) bool { return strings.Contains(a, "UTC") }); got != wantNote {
				t.Errorf("assumptions %q: a note that the window is read in UTC: %v, want %v", p.Assumptions, got, wantNote)
			}
		})
	}
}

// TestAWaitForTheMaintenanceWindowHoldsTheDeadlineAndTheTargetTimeout
// runs a canary that never answers: without a window the progress
// deadline is exceeded 10 minutes after the start and the target timeout
// removes it after an hour; while it waits for a window that opens two
// hours after the start neither clock runs, and both run from the
// opening (the operator's rules, ADR 0029).
func TestAWaitForTheMaintenanceWindowHoldsTheDeadlineAndTheTargetTimeout(t *testing.T) {
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	s := func(d time.Duration) time.Time { return start.Add(d) }
	m := &simModel{byDevice: map[string][]simSample{}}
	m.add("d1", simSample{dur: time.Hour}) // silent
	m.add("d2", simSample{dur: 10 * time.Second, outcome: events.WorkloadConverged})
	tests := []struct {
		name      string
		window    *events.MaintenanceWindow
		deadlines []time.Time
		removed   time.Time
	}{
		{"without a window the deadline is exceeded after 10 minutes and the target timeout removes it after an hour",
			nil, []time.Time{s(DefaultSimProgressDeadline)}, s(DefaultSimTargetTimeout)},
		{"a window closed for two hours holds both clocks until it opens",
			&events.MaintenanceWindow{Start: "02:00", Duration: "1h"},
			[]time.Time{s(2*time.Hour + DefaultSimProgressDeadline)}, s(2*time.Hour + DefaultSimTargetTimeout)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rev := events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "1-u", Score: json.RawMessage(`{}`),
				Targets: []string{"d1", "d2"}, Canaries: []string{"d1"}, Window: tc.window}
			p, err := simulateRevision("lab", "api", rev, m, SimulateOptions{Start: start})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.deadlines, p.DeadlineExceeded); diff != "" {
				t.Errorf("progress deadline exceeded (-want +got):\n%s", diff)
			}
			var removed time.Time
			for _, st := range p.Steps {
				if st.Type == events.TypeRolloutTargetRemoved && st.Device == "d1" {
					removed = st.Time
				}
			}
			if !removed.Equal(tc.removed) {
				t.Errorf("d1 removed at %s, want %s; steps %+v", removed, tc.removed, p.Steps)
			}
		})
	}
}

// TestAPredictionsTextShowsTheWaitForTheWindow prints a prediction whose
// canary waits for a window closed at the start: the timeline says how
// many targets wait and when the window opens, and the header says the
// window was read in UTC for the targets that reported no time zone.
func TestAPredictionsTextShowsTheWaitForTheWindow(t *testing.T) {
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	m := &simModel{byDevice: map[string][]simSample{}}
	rev := events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "1-u", Score: json.RawMessage(`{}`),
		Targets: []string{"d1", "d2"}, Canaries: []string{"d1"}, Window: &events.MaintenanceWindow{Start: "02:00", Duration: "1h"}}
	tests := []struct {
		name string
		want string
	}{
		{"the timeline says how many wait and when the window opens",
			"1 targets wait for the maintenance window (02:00 for 1h), the earliest opens at +2h0m0s (2026-12-05T02:00:00Z)"},
		{"the header says the window is read in UTC",
			"assumes: the maintenance window (02:00 for 1h) is read in UTC for 2 of 2 targets: they reported no time zone"},
		{"the header says in which zones the windows were read",
			"time zones: 0 targets read in the zone they reported, 2 in UTC (none reported)"},
	}
	p, err := simulateRevision("lab", "api", rev, m, SimulateOptions{Start: start})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := p.writeText(&out); err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(out.String(), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out.String())
			}
		})
	}
}

// TestTheLearnerTimesATargetThatWaitedFromItsWindowsOpening learns from a
// recorded rollout whose canary converged 10 s after its maintenance
// window opened, two hours after it was handed the revision: the sample
// is the 10 s the device took once it could switch, not the wait (a
// window in the simulated plan adds its own wait).
func TestTheLearnerTimesATargetThatWaitedFromItsWindowsOpening(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	opens := t0.Add(2 * time.Hour)
	tests := []struct {
		name   string
		window *events.MaintenanceWindow
		want   time.Duration
	}{
		{"a target that reported waiting for the window is timed from its opening", &events.MaintenanceWindow{Start: "02:00", Duration: "1h"}, 10 * time.Second},
		{"a revision without a window times it from being handed the revision", nil, 2*time.Hour + 10*time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keys := events.Keys{Namespace: "lab", Name: "api"}
			rev := events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "1-u", Score: json.RawMessage(`{}`),
				Targets: []string{"d1", "d2"}, Canaries: []string{"d1"}, Window: tc.window}
			var recs []events.Record
			add := func(stream string, ev events.Event, err error, at time.Time) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
				recs = append(recs, events.Record{Event: ev, Stored: at, Stream: stream, Sequence: uint64(len(recs) + 1)})
			}
			ev, err := events.New(keys, rev, events.WithCorrelation("u", 1), events.WithTime(t0))
			add(events.StreamIntent, ev, err, t0)
			// The operator's own transitions: started, then the canary
			// stage that hands d1 the revision.
			var r projections.Rollout
			p := projections.NewStoredPayload(recs[0])
			r.FoldPayload(&p)
			for range 4 {
				for _, tr := range r.NextAt(t0) {
					ev, err := events.New(keys, tr, events.WithCorrelation("u", 1), events.WithTime(t0))
					add(events.StreamRollout, ev, err, t0)
					p := projections.NewStoredPayload(recs[len(recs)-1])
					r.FoldPayload(&p)
				}
			}
			report := func(phase events.WorkloadPhase, at time.Time, windowOpens *time.Time) {
				d := events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u", Generation: 1, RevisionID: "1-u",
					Phase: phase, Since: at, WindowOpens: windowOpens}
				ev, err := events.New(events.Keys{Device: "d1"}, d, events.WithCorrelation("u", 1), events.WithTime(at))
				add(events.StreamReports, ev, err, at)
			}
			if tc.window != nil {
				report(events.WorkloadPending, t0, &opens)
			}
			report(events.WorkloadConverged, opens.Add(10*time.Second), nil)
			m := learn(recs)
			var got []time.Duration
			for _, s := range m.byDevice["d1"] {
				got = append(got, s.dur)
			}
			if diff := cmp.Diff([]time.Duration{tc.want}, got); diff != "" {
				t.Errorf("d1's samples (-want +got):\n%s", diff)
			}
		})
	}
}

package history

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
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

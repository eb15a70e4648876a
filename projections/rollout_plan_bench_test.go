package projections_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// BenchmarkPlannedRollout folds a whole rollout of 10,000 targets as the
// runner does (a decision after every report): four batches, with and
// without a disruption budget of 10 % of each of 20 sites. One op is one
// rollout; ns/report is the fold and decision per device report.
func BenchmarkPlannedRollout(b *testing.B) {
	const n = 10000
	for _, budget := range []bool{false, true} {
		b.Run(fmt.Sprintf("budget %v", budget), func(b *testing.B) {
			targets := make([]string, n)
			batches := make([]int, n)
			var groups []int
			plan := &events.RolloutPlan{Batches: []events.PlanBatch{{Size: 100, SuccessPercent: 100}, {Size: 900, SuccessPercent: 90},
				{Size: 4000, SuccessPercent: 90}, {Size: 5000, SuccessPercent: 100}}}
			if budget {
				plan.Budget = &events.DisruptionBudget{LabelKey: "site", MaxPercent: 10}
				for s := range 20 {
					plan.Budget.Values = append(plan.Budget.Values, fmt.Sprintf("site-%02d", s))
				}
				groups = make([]int, n)
			}
			for i := range n {
				targets[i] = fmt.Sprintf("device-%05d", i)
				switch {
				case i < 100:
					batches[i] = 1
				case i < 1000:
					batches[i] = 2
				case i < 5000:
					batches[i] = 3
				default:
					batches[i] = 4
				}
				if budget {
					groups[i] = i % 20
				}
			}
			rev, err := events.New(events.Keys{Namespace: "lab", Name: "api"}, events.DeploymentRevisionCreated{UID: "u1", Generation: 1, RevisionID: "r",
				Score: json.RawMessage(`{}`), Targets: targets, Canaries: []string{}, Plan: plan, TargetBatches: batches, TargetGroups: groups})
			if err != nil {
				b.Fatal(err)
			}
			reports := make([]events.Event, n)
			for i, d := range targets {
				reports[i], err = events.New(events.Keys{Device: d}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1,
					RevisionID: "r", Phase: events.WorkloadConverged})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range b.N {
				var r projections.Rollout
				decide := func() {
					for {
						next := r.Next()
						if len(next) == 0 {
							return
						}
						for _, tr := range next {
							ev, err := events.New(events.Keys{Namespace: "lab", Name: "api"}, tr)
							if err != nil {
								b.Fatal(err)
							}
							r.Fold(ev)
						}
					}
				}
				r.Fold(rev)
				decide()
				// Devices converge in the order they were handed the
				// revision; the runner decides after each report.
				for folded := 0; folded < n; {
					progressed := false
					for _, d := range r.Released() {
						i := 0
						fmt.Sscanf(d, "device-%05d", &i)
						if r.Results[d].Phase == events.WorkloadConverged {
							continue
						}
						r.Fold(reports[i])
						decide()
						folded++
						progressed = true
					}
					if !progressed {
						b.Fatalf("stuck at %d of %d: stage %s, batch %d", folded, n, r.Stage, r.Batch)
					}
				}
				if r.Stage != projections.StageSucceeded {
					b.Fatalf("stage %s", r.Stage)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/report")
		})
	}
}

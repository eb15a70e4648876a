package projections_test

import (
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// BenchmarkPayloadDecode is a Payload's first decode of the data the folds
// read most, a workload report and a rollout transition, as every fold of
// a stream record pays it once.
func BenchmarkPayloadDecode(b *testing.B) {
	const uid = "5f0c3d6e-0000-4000-8000-000000000001"
	report, err := events.New(events.Keys{Device: "edge-00042"}, events.WorkloadStatus{Namespace: "bench", Deployment: "web",
		UID: uid, Generation: 17, RevisionID: "17-0123456789abcdef", Phase: events.WorkloadConverged,
		Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, events.WithCorrelation(uid, 17))
	if err != nil {
		b.Fatal(err)
	}
	transition, err := events.New(events.Keys{Namespace: "bench", Name: "web"}, events.NewRolloutTransition(events.TypeRolloutReleased,
		events.RolloutTransition{UID: uid, Generation: 17, RevisionID: "17-0123456789abcdef",
			Counts:   events.RolloutCounts{Total: 3, Pending: 3},
			Released: []string{"edge-00001", "edge-00002", "edge-00003"}}), events.WithCorrelation(uid, 17))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("workload report", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(report.Data)))
		for b.Loop() {
			p := projections.NewPayload(report)
			if _, err := p.WorkloadStatus(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("rollout transition", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(transition.Data)))
		for b.Loop() {
			p := projections.NewPayload(transition)
			if _, err := p.RolloutTransition(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

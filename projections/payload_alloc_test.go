package projections_test

import (
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// TestAPayloadsFirstDecodeOfAReportAllocatesOnlyItsStrings: a fold's
// Payload lives on its caller's stack, and decoding a canonical workload
// report allocates its four strings (namespace, deployment, uid, revision
// id) and nothing else: no copy of the report, no Payload on the heap.
func TestAPayloadsFirstDecodeOfAReportAllocatesOnlyItsStrings(t *testing.T) {
	ev, err := events.New(events.Keys{Device: "edge-1"}, events.WorkloadStatus{Namespace: "lab", Deployment: "web", UID: "u-1", Generation: 3,
		RevisionID: "3-abc", Phase: events.WorkloadConverged, Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}, events.WithCorrelation("u-1", 3))
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		p := projections.NewPayload(ev)
		if _, err := p.WorkloadStatus(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 4 {
		t.Errorf("%.0f allocations a decode, want at most 4 (the report's strings)", allocs)
	}
}

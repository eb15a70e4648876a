package history_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
)

// TestADevicesTimelineShowsWhenItFetchedARevisionAhead: a device's
// fetch-ahead reports (ADR 0027) are on its timeline with the fetch's start
// and end, and change nothing of the rollout.
func TestADevicesTimelineShowsWhenItFetchedARevisionAhead(t *testing.T) {
	f := startFleet(t)
	api1 := f.revision("api", "f00d-uid", 1, []string{"edge-1"}, nil)
	start := time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)
	end := start.Add(42 * time.Second)
	base := events.WorkloadFetch{Namespace: "lab", Deployment: "api", UID: api1.UID, Generation: 1, RevisionID: api1.RevisionID, Images: 2, Started: start}
	started := base
	started.Phase = events.FetchStarted
	done := base
	done.Phase, done.Pulled, done.Ended = events.FetchDone, 1, &end
	f.append(events.Keys{Device: "edge-1"}, started, events.WithCorrelation(api1.UID, 1))
	f.append(events.Keys{Device: "edge-1"}, done, events.WithCorrelation(api1.UID, 1))
	h, err := history.New(history.Options{Reader: f.store})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := h.Device(f.ctx, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range tl.Entries {
		if e.Type == events.TypeWorkloadFetch {
			got = append(got, e.Deployment+": "+e.Summary)
		}
	}
	want := []string{
		"lab/api: lab/api generation 1 fetch ahead started at 2026-12-05T06:00:00Z (2 images)",
		"lab/api: lab/api generation 1 fetched ahead: 1 of 2 images pulled, 2026-12-05T06:00:00Z to 2026-12-05T06:00:42Z (42s)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fetch entries (-want +got):\n%s", diff)
	}
}

package rollouts

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
)

func prefetchRevisionRecord(t *testing.T, seq uint64, name string) events.Record {
	t.Helper()
	return foldRecord(t, seq, events.Keys{Namespace: "lab", Name: name}, events.DeploymentRevisionCreated{
		UID: "uid-" + name, Generation: 1, RevisionID: "1-" + name, ScoreDigest: "sha256:" + name,
		Score: json.RawMessage(`{"type":"PodmanV0","data":{"image":"web:1"}}`), Targets: []string{"d1", "d2"}, Canaries: []string{"d1"}, Prefetch: true})
}

func fetchRecord(t *testing.T, seq uint64, device, name string, gen int64, phase string) events.Record {
	t.Helper()
	end := time.Unix(2, 0)
	return foldRecord(t, seq, events.Keys{Device: device}, events.WorkloadFetch{Namespace: "lab", Deployment: name,
		UID: "uid-" + name, Generation: gen, RevisionID: "1-" + name, Phase: phase, Images: 1, Pulled: 1, Started: time.Unix(1, 0), Ended: &end})
}

// TestFetchReportsCountHoldersAndNeverMoveTheRollout: a device's Fetched
// report of a prefetch revision it was offered counts it in
// status.prefetched and decides nothing; a report from a device the
// revision does not target, of another revision, or not Fetched counts
// nothing; without prefetch the status has no prefetched count.
func TestFetchReportsCountHoldersAndNeverMoveTheRollout(t *testing.T) {
	web := depKey{"lab", "web"}
	one, two := int32(1), int32(2)
	tests := []struct {
		name       string
		run        func(t *testing.T, s *runnerState) folded
		want       folded
		prefetched *int32
	}{
		{"a revision without prefetch has no count", func(t *testing.T, s *runnerState) folded {
			return s.fold(sourceIntent, revisionRecord(t, 1, "web"))
		}, folded{key: web, decide: true}, nil},
		{"a prefetch revision counts none before a report", func(t *testing.T, s *runnerState) folded {
			return s.fold(sourceIntent, prefetchRevisionRecord(t, 1, "web"))
		}, folded{key: web, decide: true}, new(int32)},
		{"a target's Fetched counts it and decides nothing", func(t *testing.T, s *runnerState) folded {
			s.fold(sourceIntent, prefetchRevisionRecord(t, 1, "web"))
			s.live = true
			return s.fold(sourceReports, fetchRecord(t, 1, "d2", "web", 1, events.FetchDone))
		}, folded{key: web, health: true}, &one},
		{"a target that was handed the revision after its fetch still counts", func(t *testing.T, s *runnerState) folded {
			s.fold(sourceIntent, prefetchRevisionRecord(t, 1, "web"))
			s.fold(sourceRollouts, releasedRecord(t, 1, "web", "d1", "d2"))
			s.live = true
			s.fold(sourceReports, fetchRecord(t, 1, "d1", "web", 1, events.FetchDone))
			return s.fold(sourceReports, fetchRecord(t, 2, "d2", "web", 1, events.FetchDone))
		}, folded{key: web, health: true}, &two},
		{"a report repeated counts once", func(t *testing.T, s *runnerState) folded {
			s.fold(sourceIntent, prefetchRevisionRecord(t, 1, "web"))
			s.live = true
			s.fold(sourceReports, fetchRecord(t, 1, "d2", "web", 1, events.FetchDone))
			return s.fold(sourceReports, fetchRecord(t, 2, "d2", "web", 1, events.FetchDone))
		}, folded{key: web, health: true}, &one},
		{"a device the revision does not target is dropped", func(t *testing.T, s *runnerState) folded {
			s.fold(sourceIntent, prefetchRevisionRecord(t, 1, "web"))
			s.live = true
			return s.fold(sourceReports, fetchRecord(t, 1, "d9", "web", 1, events.FetchDone))
		}, folded{dropped: "fetch reports from a device not offered the revision they name", health: true}, new(int32)},
		{"a report of another revision counts nothing", func(t *testing.T, s *runnerState) folded {
			s.fold(sourceIntent, prefetchRevisionRecord(t, 1, "web"))
			s.live = true
			return s.fold(sourceReports, fetchRecord(t, 1, "d2", "web", 7, events.FetchDone))
		}, folded{dropped: "fetch reports from a device not offered the revision they name", health: true}, new(int32)},
		{"Started and Failed count nothing", func(t *testing.T, s *runnerState) folded {
			s.fold(sourceIntent, prefetchRevisionRecord(t, 1, "web"))
			s.live = true
			s.fold(sourceReports, fetchRecord(t, 1, "d2", "web", 1, events.FetchStarted))
			return s.fold(sourceReports, fetchRecord(t, 2, "d1", "web", 1, events.FetchFailed))
		}, folded{health: true}, new(int32)},
		{"while catching up a report before its revision counts once the revision is known", func(t *testing.T, s *runnerState) folded {
			f := s.fold(sourceReports, fetchRecord(t, 1, "d2", "web", 1, events.FetchDone))
			s.fold(sourceIntent, prefetchRevisionRecord(t, 1, "web"))
			return f
		}, folded{key: web, health: true}, &one},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newRunnerState()
			got := tc.run(t, s)
			if got != tc.want {
				t.Errorf("outcome %+v, want %+v", got, tc.want)
			}
			if diff := cmp.Diff(tc.prefetched, s.prefetched(web)); diff != "" {
				t.Errorf("status.prefetched (-want +got):\n%s", diff)
			}
			if c := s.rollouts[web].Counts(); c.Succeeded != 0 || c.Failed != 0 {
				t.Errorf("a fetch report moved the rollout: %+v", c)
			}
		})
	}
}

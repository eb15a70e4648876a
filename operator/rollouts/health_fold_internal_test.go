package rollouts

import (
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

func healthRecord(t *testing.T, seq uint64, device, name string, typ events.Type) events.Record {
	t.Helper()
	rec := foldRecord(t, seq, events.Keys{Device: device}, events.NewWorkloadHealth(typ, events.WorkloadHealth{Namespace: "lab", Deployment: name,
		UID: "uid-" + name, Generation: 1, RevisionID: "1-" + name, Reason: events.HealthCrashLoop, Window: 300,
		Services: []events.ServiceHealth{{Name: "web", State: "exited", Restarts: 3, ExitCode: 2}}}))
	rec.Stored = time.Unix(int64(seq), 0)
	return rec
}

func releasedRecord(t *testing.T, seq uint64, name string, devices ...string) events.Record {
	t.Helper()
	return foldRecord(t, seq, events.Keys{Namespace: "lab", Name: name}, events.NewRolloutTransition(events.TypeRolloutReleased,
		events.RolloutTransition{UID: "uid-" + name, Generation: 1, RevisionID: "1-" + name, Released: devices}))
}

// TestTheFoldRoutesHealthReportsAndAcceptsThemFromHoldersOnly: a health
// report on the reports source is routed by its type (never decoded as a
// workload report, never a skip), decides nothing, and is accepted once
// live only from a device that holds the revision it names; one folded
// while catching up is kept only if the device holds the revision when the
// runner goes live.
func TestTheFoldRoutesHealthReportsAndAcceptsThemFromHoldersOnly(t *testing.T) {
	web := depKey{"lab", "web"}
	degraded := func(s *runnerState) int { return s.health[web].Len() }
	tests := []struct {
		name string
		run  func(t *testing.T, s *runnerState) folded
		want folded
		// degraded is how many devices the state keeps degraded.
		degraded int
	}{
		{"a live holder's degraded report is folded into the status, deciding nothing", func(t *testing.T, s *runnerState) folded {
			s.fold(sourceIntent, revisionRecord(t, 1, "web"))
			s.fold(sourceRollouts, releasedRecord(t, 1, "web", "d1", "d2"))
			s.live = true
			s.dirtyStat = map[depKey]bool{}
			f := s.fold(sourceReports, healthRecord(t, 1, "d1", "web", events.TypeWorkloadDegraded))
			if !s.dirtyStat[web] {
				t.Error("the status is not dirty after a degraded report")
			}
			return f
		}, folded{key: web, health: true}, 1},
		{"a live device that does not hold the revision is dropped", func(t *testing.T, s *runnerState) folded {
			s.fold(sourceIntent, revisionRecord(t, 1, "web"))
			s.fold(sourceRollouts, releasedRecord(t, 1, "web", "d1"))
			s.live = true
			return s.fold(sourceReports, healthRecord(t, 1, "d2", "web", events.TypeWorkloadDegraded))
		}, folded{dropped: "health reports from a device that does not hold the revision they name", health: true}, 0},
		{"a live report about a Deployment the runner does not know is dropped", func(t *testing.T, s *runnerState) folded {
			s.live = true
			return s.fold(sourceReports, healthRecord(t, 1, "d1", "ghost", events.TypeWorkloadDegraded))
		}, folded{dropped: "health reports from a device that does not hold the revision they name", health: true}, 0},
		{"a report folded while catching up, before the release, is kept once the release is folded", func(t *testing.T, s *runnerState) folded {
			f := s.fold(sourceReports, healthRecord(t, 1, "d1", "web", events.TypeWorkloadDegraded))
			s.fold(sourceIntent, revisionRecord(t, 1, "web"))
			s.fold(sourceRollouts, releasedRecord(t, 1, "web", "d1"))
			for k := range s.health { // as goLive does
				s.pruneHealth(k, time.Time{})
			}
			return f
		}, folded{key: web, health: true}, 1},
		{"a report folded while catching up survives a canary release that hands the revision to another device first", func(t *testing.T, s *runnerState) folded {
			f := s.fold(sourceReports, healthRecord(t, 1, "d2", "web", events.TypeWorkloadDegraded))
			s.fold(sourceIntent, revisionRecord(t, 1, "web"))
			s.fold(sourceRollouts, releasedRecord(t, 1, "web", "d1"))
			s.fold(sourceRollouts, releasedRecord(t, 2, "web", "d2"))
			for k := range s.health { // as goLive does
				s.pruneHealth(k, time.Time{})
			}
			return f
		}, folded{key: web, health: true}, 1},
		{"a report folded while catching up from a device never handed the revision is pruned going live", func(t *testing.T, s *runnerState) folded {
			f := s.fold(sourceReports, healthRecord(t, 1, "d2", "web", events.TypeWorkloadDegraded))
			s.fold(sourceIntent, revisionRecord(t, 1, "web"))
			s.fold(sourceRollouts, releasedRecord(t, 1, "web", "d1"))
			for k := range s.health {
				s.pruneHealth(k, time.Time{})
			}
			return f
		}, folded{key: web, health: true}, 0},
		{"a workload report of the device's revision does not clear it; recovered does", func(t *testing.T, s *runnerState) folded {
			s.fold(sourceIntent, revisionRecord(t, 1, "web"))
			s.fold(sourceRollouts, releasedRecord(t, 1, "web", "d1", "d2"))
			s.live = true
			s.fold(sourceReports, healthRecord(t, 1, "d1", "web", events.TypeWorkloadDegraded))
			s.fold(sourceReports, healthRecord(t, 2, "d2", "web", events.TypeWorkloadDegraded))
			s.fold(sourceReports, reportRecord(t, 3, "d1", "web"))
			return s.fold(sourceReports, healthRecord(t, 4, "d2", "web", events.TypeWorkloadRecovered))
		}, folded{key: web, health: true}, 1},
		{"the Deployment's deletion clears its degraded devices", func(t *testing.T, s *runnerState) folded {
			s.fold(sourceIntent, revisionRecord(t, 1, "web"))
			s.fold(sourceRollouts, releasedRecord(t, 1, "web", "d1"))
			s.live = true
			s.fold(sourceReports, healthRecord(t, 1, "d1", "web", events.TypeWorkloadDegraded))
			return s.fold(sourceIntent, foldRecord(t, 2, events.Keys{Namespace: "lab", Name: "web"}, events.DeploymentDeleted{UID: "uid-web", Generation: 1}))
		}, folded{key: web, decide: true}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newRunnerState()
			got := tc.run(t, s)
			if got != tc.want {
				t.Errorf("outcome %+v, want %+v", got, tc.want)
			}
			if n := degraded(s); n != tc.degraded {
				t.Errorf("%d devices degraded, want %d", n, tc.degraded)
			}
		})
	}
}

package rollouts

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// The fold is the rollout runner without its sinks: records in, state and
// outcomes out, no server.

func foldRecord(t *testing.T, seq uint64, keys events.Keys, d events.Data) events.Record {
	t.Helper()
	ev, err := events.New(keys, d)
	if err != nil {
		t.Fatal(err)
	}
	return events.Record{Event: ev, Sequence: seq}
}

func revisionRecord(t *testing.T, seq uint64, name string) events.Record {
	t.Helper()
	return foldRecord(t, seq, events.Keys{Namespace: "lab", Name: name}, events.DeploymentRevisionCreated{
		UID: "uid-" + name, Generation: 1, RevisionID: "1-" + name, ScoreDigest: "sha256:" + name,
		Score: json.RawMessage(`{"type":"PodmanV0","data":{"image":"web:1"}}`), Targets: []string{"d1", "d2"}})
}

func reportRecord(t *testing.T, seq uint64, device, name string) events.Record {
	t.Helper()
	return foldRecord(t, seq, events.Keys{Device: device}, events.WorkloadStatus{Namespace: "lab", Deployment: name,
		UID: "uid-" + name, Generation: 1, RevisionID: "1-" + name, Phase: events.WorkloadConverged, Since: time.Unix(1, 0)})
}

func TestTheRolloutFold(t *testing.T) {
	web := depKey{"lab", "web"}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, s *runnerState) folded
		want folded
		// check, when set, looks at the state after the last step.
		check func(t *testing.T, s *runnerState)
	}{
		{
			name: "a revision names its Deployment to decide and marks its status dirty; no intent changes before a release",
			run:  func(t *testing.T, s *runnerState) folded { return s.fold(sourceIntent, revisionRecord(t, 1, "web")) },
			want: folded{key: web, decide: true},
			check: func(t *testing.T, s *runnerState) {
				if len(s.dirtyKV) != 0 || !s.dirtyStat[web] || s.seqs[sourceIntent] != 1 || !s.changed {
					t.Errorf("state after a revision: dirtyKV %v, dirtyStat %v, seqs %v, changed %v", s.dirtyKV, s.dirtyStat, s.seqs, s.changed)
				}
			},
		},
		{
			name: "a record the state already covers changes nothing",
			run: func(t *testing.T, s *runnerState) folded {
				s.fold(sourceIntent, revisionRecord(t, 5, "web"))
				s.changed = false
				return s.fold(sourceIntent, revisionRecord(t, 5, "web"))
			},
			want:  folded{},
			check: func(t *testing.T, s *runnerState) { assertUnchanged(t, s) },
		},
		{
			name: "a report whose data does not decode is a skip, and the position moves past it",
			run: func(t *testing.T, s *runnerState) folded {
				rec := reportRecord(t, 3, "d1", "web")
				rec.Event.Data = json.RawMessage(`{"generation":"not a number"}`)
				f := s.fold(sourceReports, rec)
				if f.skip == nil || f.skip.Sequence != 3 {
					t.Fatalf("outcome %+v: want a skip of sequence 3", f)
				}
				f.skip = nil
				return f
			},
			want: folded{},
			check: func(t *testing.T, s *runnerState) {
				if s.seqs[sourceReports] != 3 || len(s.rollouts) != 0 {
					t.Errorf("seqs %v, rollouts %d: want the position at 3 and no rollout", s.seqs, len(s.rollouts))
				}
			},
		},
		{
			name: "an undecodable record on a rollout subject names its Deployment, whose next append expects its sequence",
			run: func(t *testing.T, s *runnerState) folded {
				f := s.pass(sourceRollouts, &events.RecordError{Subject: "fleet.rollout.deployment.lab.web", Sequence: 9})
				f.skip = nil
				return f
			},
			want: folded{key: web, decide: true},
			check: func(t *testing.T, s *runnerState) {
				if s.rolloutSeq[web] != 9 || s.seqs[sourceRollouts] != 9 {
					t.Errorf("rolloutSeq %d, seqs %v: want 9", s.rolloutSeq[web], s.seqs)
				}
			},
		},
		{
			name: "an undecodable record already passed is not counted again",
			run: func(t *testing.T, s *runnerState) folded {
				s.pass(sourceReports, &events.RecordError{Subject: "fleet.report.d1.workload", Sequence: 4})
				return s.pass(sourceReports, &events.RecordError{Subject: "fleet.report.d1.workload", Sequence: 4})
			},
			want: folded{},
		},
		{
			name: "while catching up, reports about Deployments without a revision are kept, whatever their number",
			run: func(t *testing.T, s *runnerState) folded {
				var f folded
				for i := range maxRevisionless + 1 {
					f = s.fold(sourceReports, reportRecord(t, uint64(i+1), "d1", fmt.Sprintf("dep%d", i)))
				}
				return f
			},
			want: folded{key: depKey{"lab", fmt.Sprintf("dep%d", maxRevisionless)}, decide: true},
			check: func(t *testing.T, s *runnerState) {
				if s.revisionless != maxRevisionless+1 || s.dropped != 0 {
					t.Errorf("revisionless %d, dropped %d", s.revisionless, s.dropped)
				}
			},
		},
		{
			name: "once live, a report about one Deployment too many without a revision is dropped",
			run: func(t *testing.T, s *runnerState) folded {
				s.live = true
				for i := range maxRevisionless {
					s.fold(sourceReports, reportRecord(t, uint64(i+1), "d1", fmt.Sprintf("dep%d", i)))
				}
				return s.fold(sourceReports, reportRecord(t, maxRevisionless+1, "d1", "one-too-many"))
			},
			want: folded{dropped: "Deployments without a known revision"},
			check: func(t *testing.T, s *runnerState) {
				if s.dropped != 1 || len(s.rollouts) != maxRevisionless {
					t.Errorf("dropped %d, rollouts %d", s.dropped, len(s.rollouts))
				}
			},
		},
		{
			name: "a report that gives a revisionless Deployment its revision counts it out of the bound",
			run: func(t *testing.T, s *runnerState) folded {
				s.fold(sourceReports, reportRecord(t, 1, "d1", "web"))
				return s.fold(sourceIntent, revisionRecord(t, 1, "web"))
			},
			want: folded{key: web, decide: true},
			check: func(t *testing.T, s *runnerState) {
				if s.revisionless != 0 {
					t.Errorf("revisionless %d, want 0", s.revisionless)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRunnerState()
			got := tc.run(t, s)
			if got.key != tc.want.key || got.decide != tc.want.decide || got.dropped != tc.want.dropped || (got.skip != nil) != (tc.want.skip != nil) {
				t.Errorf("outcome %+v, want %+v", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, s)
			}
		})
	}
}

func assertUnchanged(t *testing.T, s *runnerState) {
	t.Helper()
	if s.changed {
		t.Error("the state changed")
	}
}

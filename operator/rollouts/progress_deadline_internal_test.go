package rollouts

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// statusLog is a DeploymentStatusWriter that keeps what it is handed.
type statusLog struct{ got []fleetv1.DeploymentStatus }

func (l *statusLog) WriteDeploymentStatus(_ context.Context, _, _ string, st fleetv1.DeploymentStatus) error {
	l.got = append(l.got, st)
	return nil
}

// TestTheTickWritesAStatusOnlyWhenTheDeadlineVerdictFlips: the runner's
// tick judges the progress deadline at the clock's time; a Deployment's
// status is written again when its verdict flips, not on every tick, and a
// report that is a target's first moves the clock back into the deadline.
func TestTheTickWritesAStatusOnlyWhenTheDeadlineVerdictFlips(t *testing.T) {
	web := depKey{"lab", "web"}
	s := newRunnerState()
	at := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	rec := func(seq uint64, keys events.Keys, d events.Data, stored time.Time) events.Record {
		ev, err := events.New(keys, d, events.WithTime(stored))
		if err != nil {
			t.Fatal(err)
		}
		return events.Record{Event: ev, Sequence: seq, Stored: stored}
	}
	rev := events.DeploymentRevisionCreated{UID: "uid-web", Generation: 1, RevisionID: "1-web", ScoreDigest: "sha256:web",
		Score: []byte(`{"type":"PodmanV0"}`), Targets: []string{"d1", "d2"}}
	s.fold(sourceIntent, rec(1, events.Keys{Namespace: "lab", Name: "web"}, rev, at))
	s.fold(sourceRollouts, rec(1, events.Keys{Namespace: "lab", Name: "web"}, events.NewRolloutTransition(events.TypeRolloutReleased,
		events.RolloutTransition{UID: "uid-web", Generation: 1, RevisionID: "1-web"}), at.Add(time.Second)))
	report := func(seq uint64, device string, phase events.WorkloadPhase, stored time.Time) {
		s.fold(sourceReports, rec(seq, events.Keys{Device: device}, events.WorkloadStatus{Namespace: "lab", Deployment: "web",
			UID: "uid-web", Generation: 1, RevisionID: "1-web", Phase: phase, Error: "registry unavailable, retrying", Since: stored.AddDate(0, 0, -3)}, stored))
	}
	report(1, "d1", events.WorkloadPending, at.Add(10*time.Second))
	s.live = true
	m := NewMetrics()
	r := &runner{RolloutRunner: &RolloutRunner{ProgressDeadline: time.Minute, Log: slog.New(slog.DiscardHandler), Metrics: m}, s: s}
	w := &statusLog{}
	ctx := context.Background()
	tick := func(now time.Time) {
		r.progressDeadlines(ctx, now)
		writeStatus(ctx, w, r.Log, m, s, now, r.ProgressDeadline)
	}
	progressing := func() *metav1.Condition {
		if len(w.got) == 0 {
			t.Fatal("no status written")
		}
		return meta.FindStatusCondition(w.got[len(w.got)-1].Conditions, fleetv1.ConditionProgressing)
	}

	tick(at.Add(69 * time.Second)) // the first write: the fold marked it dirty
	if c := progressing(); len(w.got) != 1 || c.Status != metav1.ConditionTrue {
		t.Fatalf("%d writes, Progressing %+v; want one, True", len(w.got), c)
	}
	tick(at.Add(69*time.Second + 500*time.Millisecond))
	if len(w.got) != 1 {
		t.Errorf("%d writes before the deadline, want 1", len(w.got))
	}
	tick(at.Add(70 * time.Second)) // d1's first report at 10s, plus the minute
	if c := progressing(); len(w.got) != 2 || c.Status != metav1.ConditionFalse || c.Reason != fleetv1.ReasonProgressDeadlineExceeded ||
		!c.LastTransitionTime.Time.Equal(at.Add(70*time.Second)) {
		t.Fatalf("%d writes, Progressing %+v; want a second write, False ProgressDeadlineExceeded since 12:01:10", len(w.got), c)
	}
	if g := gauges(t, m.deadlines); !s.exceeded[web] || len(g) != 1 || g[0] != 1 {
		t.Errorf("exceeded %v, gauge series %v; want remembered and one series at 1", s.exceeded[web], g)
	}
	tick(at.Add(75 * time.Second))
	if len(w.got) != 2 {
		t.Errorf("%d writes while the verdict holds, want 2: no write per tick", len(w.got))
	}
	// d1 retries: no progress. d2's first report is.
	report(2, "d1", events.WorkloadApplying, at.Add(80*time.Second))
	tick(at.Add(81 * time.Second))
	if c := progressing(); c.Status != metav1.ConditionFalse {
		t.Errorf("after a retry of d1, Progressing %+v; want still False", c)
	}
	report(3, "d2", events.WorkloadPending, at.Add(90*time.Second))
	tick(at.Add(91 * time.Second))
	if c := progressing(); c.Status != metav1.ConditionTrue || s.exceeded[web] {
		t.Errorf("after d2's first report, Progressing %+v (exceeded %v); want True", c, s.exceeded[web])
	}
	if g := gauges(t, m.deadlines); len(g) != 0 {
		t.Errorf("gauge series %v after progress, want none", g)
	}
}

// gauges are the values of c's series.
func gauges(t *testing.T, c prometheus.Collector) []float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 16)
	c.Collect(ch)
	close(ch)
	var out []float64
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		out = append(out, d.GetGauge().GetValue())
	}
	return out
}

package projections_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/projections"
)

// fleet folds events like the operator's runner does (in place:
// Rollout.Fold) and decides transitions. The live side of the rebuild test
// folds each event (Rollout.Fold, Intent.Apply); the rebuild folds each
// payload, decoded once (Rollout.FoldPayload, Intent.ApplyPayload), so the
// test also proves both give the same state.
type fleet struct {
	rollouts map[events.Keys]projections.Rollout
	intent   *projections.Intent
	payloads bool
}

func newFleet(payloads bool) *fleet {
	return &fleet{rollouts: map[events.Keys]projections.Rollout{}, intent: projections.NewIntent(), payloads: payloads}
}

func (f *fleet) apply(ev events.Event) {
	if f.payloads {
		f.applyPayload(ev)
		return
	}
	k := ev.Keys
	if ev.Type == events.TypeWorkloadStatus {
		d, _ := events.Decode[events.WorkloadStatus](ev)
		k = events.Keys{Namespace: d.Namespace, Name: d.Deployment}
	} else {
		f.intent.Apply(ev)
	}
	ro := f.rollouts[k]
	ro.Fold(ev)
	f.rollouts[k] = ro
}

// applyPayload is apply decoding the event's data once: to route a report
// and to fold it.
func (f *fleet) applyPayload(ev events.Event) {
	p := projections.NewPayload(ev)
	k := ev.Keys
	if ev.Type == events.TypeWorkloadStatus {
		d, _ := p.WorkloadStatus()
		k = events.Keys{Namespace: d.Namespace, Name: d.Deployment}
	} else {
		f.intent.ApplyPayload(&p)
	}
	ro := f.rollouts[k]
	ro.FoldPayload(&p)
	f.rollouts[k] = ro
}

// snapshot is every KV value and every status, as bytes.
func (f *fleet) snapshot(t testing.TB) map[string]string {
	out := map[string]string{}
	for _, d := range f.intent.Devices() {
		v, _ := f.intent.Value(d)
		out["kv/"+d] = string(v)
	}
	for k, r := range f.rollouts {
		if st, ok := r.Status(); ok {
			b, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			out["status/"+k.Namespace+"/"+k.Name] = string(b)
		}
	}
	return out
}

// history appends a random but realistic fleet history: revisions with
// frozen targets and canaries, device reports (converged, failed, late and
// duplicate), deletions, and the transitions the state machine decides.
func history(t testing.TB, ctx context.Context, st *events.Store, n int, cuts []int) (map[int]map[string]string, map[int]map[string]uint64) {
	rng := rand.New(rand.NewPCG(7, 11))
	live := newFleet(false)
	devices := make([]string, 300)
	for i := range devices {
		devices[i] = fmt.Sprintf("dev-%03d", i)
	}
	deps := make([]events.Keys, 40)
	for i := range deps {
		deps[i] = events.Keys{Namespace: fmt.Sprintf("ns-%d", i%4), Name: fmt.Sprintf("app-%d", i)}
	}
	uid := map[events.Keys]string{}
	gen := map[events.Keys]int64{}
	lastSeq := map[string]uint64{} // stream → last sequence, to cut replays
	snaps := map[int]map[string]string{}
	seqs := map[int]map[string]uint64{}
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	count := 0
	appendEv := func(ev events.Event) {
		if ev.Type == events.TypeWorkloadStatus {
			// A device's report: published as a device does, never
			// acknowledged, read back once stored.
			rec := natstest.Report(t, ctx, st, ev)
			lastSeq[rec.Stream] = rec.Sequence
		} else {
			p, err := st.Append(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			lastSeq[p.Stream] = p.Sequence
		}
		live.apply(ev)
		count++
		if slices.Contains(cuts, count) {
			snaps[count] = live.snapshot(t)
			seqs[count] = map[string]uint64{}
			for k, v := range lastSeq {
				seqs[count][k] = v
			}
		}
	}
	decide := func(k events.Keys) {
		for _, tr := range live.rollouts[k].Next() {
			clock = clock.Add(time.Millisecond)
			ev, err := events.New(k, tr, events.WithTime(clock))
			if err != nil {
				t.Fatal(err)
			}
			appendEv(ev)
		}
	}
	for count < n {
		clock = clock.Add(time.Second)
		k := deps[rng.IntN(len(deps))]
		switch x := rng.IntN(100); {
		case x < 8 || uid[k] == "": // a new revision (or a recreated Deployment)
			if uid[k] == "" {
				uid[k] = fmt.Sprintf("uid-%s-%d", k.Name, count)
			}
			gen[k]++
			var targets, canaries []string
			for _, d := range devices {
				if rng.IntN(10) == 0 {
					targets = append(targets, d)
					if rng.IntN(5) == 0 {
						canaries = append(canaries, d)
					}
				}
			}
			ev, _ := events.New(k, events.DeploymentRevisionCreated{UID: uid[k], Generation: gen[k], RevisionID: fmt.Sprint(gen[k]),
				ScoreDigest: "sha256:" + fmt.Sprint(count), Score: json.RawMessage(fmt.Sprintf(`{"n":%d}`, count)), Targets: targets, Canaries: canaries},
				events.WithTime(clock))
			appendEv(ev)
		case x < 9: // deletion
			ev, _ := events.New(k, events.DeploymentDeleted{UID: uid[k], Generation: gen[k]}, events.WithTime(clock))
			appendEv(ev)
			uid[k], gen[k] = "", 0
			continue
		default: // a report from a released target, sometimes late or for an old revision
			r := live.rollouts[k]
			rel := r.Released()
			if len(rel) == 0 {
				break
			}
			phase := events.WorkloadConverged
			if rng.IntN(12) == 0 {
				phase = events.WorkloadFailed
			}
			g, since := r.Generation, clock
			if rng.IntN(20) == 0 {
				g-- // a report for an older revision
			}
			if rng.IntN(20) == 0 {
				since = clock.Add(-time.Hour) // a late report
			}
			dev := rel[rng.IntN(len(rel))]
			ev, _ := events.New(events.Keys{Device: dev}, events.WorkloadStatus{Namespace: k.Namespace, Deployment: k.Name, UID: r.UID,
				Generation: g, Phase: phase, Error: map[bool]string{true: "exit 1"}[phase == events.WorkloadFailed], Since: since}, events.WithTime(clock))
			appendEv(ev)
		}
		decide(k)
	}
	return snaps, seqs
}

// rebuild folds the stored streams from zero up to a cut, one stream after
// the other (a very different interleaving from the live one).
func rebuild(t testing.TB, ctx context.Context, st *events.Store, upTo map[string]uint64) (*fleet, int) {
	f := newFleet(true)
	n := 0
	for _, filter := range []string{"fleet.report.*.workload", "fleet.rollout.deployment.*.*", "fleet.intent.deployment.*.*"} {
		stream, _ := events.StreamOf(filter)
		for r, err := range st.Replay(ctx, filter, events.FromStart()) {
			if err != nil {
				t.Fatal(err)
			}
			if r.Sequence > upTo[stream] {
				break
			}
			f.apply(r.Event)
			n++
		}
	}
	return f, n
}

func TestRebuildFromZeroIsByteIdenticalToTheLiveProjection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	cuts := []int{1_000, 5_000, 10_000, 12_000}
	snaps, seqs := history(t, ctx, st, 12_000, cuts)
	for _, cut := range cuts {
		t.Run(fmt.Sprintf("at event %d", cut), func(t *testing.T) {
			f, n := rebuild(t, ctx, st, seqs[cut])
			if n != cut {
				t.Fatalf("rebuild folded %d events, want %d", n, cut)
			}
			got := f.snapshot(t)
			if diff := cmp.Diff(snaps[cut], got); diff != "" {
				t.Errorf("rebuild differs from live (-live +rebuild):\n%s", diff)
			}
			if len(got) < 10 {
				t.Errorf("only %d values at the cut: the history is too thin to prove anything", len(got))
			}
		})
	}
}

// BenchmarkRebuild measures rebuilding every projection from zero against a
// raw ordered replay of the same streams (events/s, and the ratio).
//
// The two are interleaved, one of each per iteration, and start alike: the
// garbage of the one before is collected first (runtime.GC, untimed), and
// the order alternates (raw first, then rebuild first), so neither always
// runs after the other. The figures are the medians of the iterations: one
// slow iteration of either (the machine's other work) moves a median less
// than a sum; the ratio is the median of each iteration's own ratio. Run
// several iterations (-benchtime=5x).
func BenchmarkRebuild(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour) // Report flushes: it needs a deadline
	defer cancel()
	_, st := natstest.Provisioned(b)
	const n = 12_000
	_, _ = history(b, ctx, st, n, nil)
	all := map[string]uint64{events.StreamIntent: ^uint64(0), events.StreamRollout: ^uint64(0), events.StreamReports: ^uint64(0)}
	replay := func() (time.Duration, int) {
		runtime.GC()
		t0 := time.Now()
		m := 0
		for _, filter := range []string{"fleet.report.*.workload", "fleet.rollout.deployment.*.*", "fleet.intent.deployment.*.*"} {
			for _, err := range st.Replay(ctx, filter, events.FromStart()) {
				if err != nil {
					b.Fatal(err)
				}
				m++
			}
		}
		return time.Since(t0), m
	}
	fold := func() (time.Duration, int) {
		runtime.GC()
		t0 := time.Now()
		f, got := rebuild(b, ctx, st, all)
		_ = f.snapshot(b)
		return time.Since(t0), got
	}
	var raws, folds []time.Duration
	read := n
	for i := range b.N {
		var raw, fd time.Duration
		var m, got int
		if i%2 == 0 {
			raw, m = replay()
			fd, got = fold()
		} else {
			fd, got = fold()
			raw, m = replay()
		}
		if got != m {
			b.Fatalf("rebuild folded %d, replay read %d", got, m)
		}
		read = m
		raws, folds = append(raws, raw), append(folds, fd)
	}
	raw, fd := median(raws), median(folds)
	b.ReportMetric(float64(read)/raw.Seconds(), "replay-events/s")
	b.ReportMetric(float64(read)/fd.Seconds(), "rebuild-events/s")
	b.ReportMetric(raw.Seconds()/fd.Seconds(), "ratio-of-medians")
	// Each iteration's raw replay and rebuild ran back to back, under about
	// the same load: the median of their ratios is the ratio, the load's
	// drift between iterations cancelled.
	pairs := make([]time.Duration, len(raws))
	for i := range raws {
		pairs[i] = time.Duration(float64(time.Second) * raws[i].Seconds() / folds[i].Seconds())
	}
	b.ReportMetric(median(pairs).Seconds(), "ratio")
	ratio := median(pairs).Seconds()
	fmt.Printf("goal        projection rebuild ≥ 0.5× raw ordered replay: %.2f× (median of %d pairs): %s\n", ratio, len(pairs), map[bool]string{true: "met", false: "NOT met"}[ratio >= 0.5])
}

// median returns the median of ds (the mean of the middle two of an even
// number).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

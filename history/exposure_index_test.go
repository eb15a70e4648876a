package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// randomHistory writes a random history of lab/api (recreated once under
// a new UID) and lab/web: revisions whose images repeat (a rollback is a
// new revision with an old image), canaries never released, devices
// reporting any revision in any order and phase (rollbacks, removals,
// repeats), crash loops, hostile devices (one reporting revisions it was
// never handed, one a revision before it exists, one UIDs, generations
// and names of nothing, one a phase too long for the index, one flooding
// reports alternating revisions and phases) and reports
// that do not decode. index, when set, is called at random points: the
// index writer catches up there. It returns the stream time of a moment in
// the middle.
func randomHistory(t *testing.T, ctx context.Context, w streamWriter, seed uint64, steps int, index func()) time.Time {
	t.Helper()
	rnd := rand.New(rand.NewPCG(seed, seed*7+1))
	devs := []string{"d0", "d1", "d2", "d3", "d4", "d5"}
	images := []string{"registry.example.com/api:v1", "registry.example.com/api:v2", "registry.example.com/api:v3"}
	type dep struct {
		name, uid string
		gen       int64
	}
	deps := []*dep{{"api", "uid-api-a", 0}, {"web", "uid-web", 0}}
	var revs []events.DeploymentRevisionCreated
	revOf := map[string]string{} // RevisionID: the Deployment name
	newRev := func(d *dep) {
		d.gen++
		img := images[rnd.IntN(len(images))]
		if d.name == "web" {
			img = "registry.example.com/web:v1"
		}
		targets := devs[:2+rnd.IntN(len(devs)-1)]
		rev := events.DeploymentRevisionCreated{UID: d.uid, Generation: d.gen, RevisionID: fmt.Sprintf("%d-%s", d.gen, d.uid),
			ScoreDigest: fmt.Sprintf("sha256:%s%d", d.uid, d.gen),
			Score:       json.RawMessage(fmt.Sprintf(`{"type":"PodmanV0","data":{"services":[{"name":"s","image":"%s"}]}}`, img)),
			Targets:     targets, Canaries: targets[:1]}
		w.revision("lab", d.name, rev, 0)
		revs = append(revs, rev)
		revOf[rev.RevisionID] = d.name
	}
	report := func(device, name string, uid string, gen int64, phase events.WorkloadPhase) {
		w.report(device, events.WorkloadStatus{Namespace: "lab", Deployment: name, UID: uid, Generation: gen,
			RevisionID: fmt.Sprintf("%d-%s", gen, uid), Phase: phase, Since: time.Now().UTC()})
	}
	phases := []events.WorkloadPhase{events.WorkloadApplying, events.WorkloadConverged, events.WorkloadConverged, events.WorkloadFailed, events.WorkloadRemoved}
	// A hostile device claims generation 2 of lab/api before it exists:
	// the writer indexes it when the intent holds generation 2 by then (an
	// interval opened before its revision: the question reads the
	// device's reports), and marks the device unindexed otherwise.
	report("prophet", "api", "uid-api-a", 2, events.WorkloadConverged)
	newRev(deps[0])
	// Another reports a phase as long as a report can hold: its record
	// would not fit the index's bound, the device is marked unindexed
	// (the writer never stops there).
	report("verbose", "api", "uid-api-a", 1, events.WorkloadPhase(strings.Repeat("x", 60_000)))
	newRev(deps[1])
	var middle time.Time
	for i := range steps {
		if i == steps/2 {
			// The stream time of the last report stored so far.
			str, err := w.st.JetStream().Stream(ctx, events.StreamReports)
			if err != nil {
				t.Fatal(err)
			}
			middle = str.CachedInfo().State.LastTime.UTC()
		}
		switch n := rnd.IntN(100); {
		case n < 8:
			newRev(deps[rnd.IntN(len(deps))])
		case n < 9 && deps[0].uid == "uid-api-a":
			// lab/api deleted and recreated: a new UID from generation 1.
			w.append(events.Keys{Namespace: "lab", Name: "api"}, events.DeploymentDeleted{UID: deps[0].uid, Generation: deps[0].gen}, deps[0].uid, deps[0].gen)
			deps[0].uid, deps[0].gen = "uid-api-b", 0
			newRev(deps[0])
		case n < 70:
			rev := revs[rnd.IntN(len(revs))]
			if rnd.IntN(4) > 0 { // mostly the newest revisions
				rev = revs[len(revs)-1-rnd.IntN(min(3, len(revs)))]
			}
			report(devs[rnd.IntN(len(devs))], revOf[rev.RevisionID], rev.UID, rev.Generation, phases[rnd.IntN(len(phases))])
		case n < 80:
			rev := revs[rnd.IntN(len(revs))]
			ev, err := events.New(events.Keys{Device: devs[rnd.IntN(len(devs))]}, events.NewWorkloadHealth(events.TypeWorkloadDegraded,
				events.WorkloadHealth{Namespace: "lab", Deployment: revOf[rev.RevisionID], UID: rev.UID, Generation: rev.Generation, RevisionID: rev.RevisionID,
					Reason: events.HealthCrashLoop, Window: 60}), events.WithCorrelation(rev.UID, rev.Generation))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.st.Report(ctx, ev); err != nil {
				t.Fatal(err)
			}
		case n < 88:
			// The hostile devices: evil reports revisions it was never
			// handed (indexed, role other); mallory UIDs and generations
			// of nothing (unindexed) and names that are no subject token.
			rev := revs[rnd.IntN(len(revs))]
			switch rnd.IntN(5) {
			case 4:
				// flood floods: reports alternating the newest revisions
				// and phases, two or three index records each until the
				// writer's per-device limit marks it unindexed.
				for j := range 30 {
					r := revs[len(revs)-1-j%min(2, len(revs))]
					report("flood", revOf[r.RevisionID], r.UID, r.Generation, phases[j%len(phases)])
				}
			case 0:
				report("evil", revOf[rev.RevisionID], rev.UID, rev.Generation, phases[rnd.IntN(len(phases))])
			case 1:
				report("mallory", "api", "uid-api-a", int64(rnd.IntN(9)-2), events.WorkloadConverged)
			case 2:
				report("mallory", "no.such>name", rev.UID, rev.Generation, events.WorkloadConverged)
			default:
				report("mallory", revOf[rev.RevisionID], "uid-forged", rev.Generation, events.WorkloadApplying)
			}
		case n < 92:
			w.garbage(devs[rnd.IntN(len(devs))])
		default:
			if index != nil {
				index()
			}
		}
	}
	return middle
}

// report stores one workload report of device.
func (w streamWriter) report(device string, d events.WorkloadStatus) {
	w.tb.Helper()
	ev, err := events.New(events.Keys{Device: device}, d, events.WithCorrelation(d.UID, d.Generation))
	if err != nil {
		w.tb.Fatal(err)
	}
	if err := w.st.Report(w.ctx, ev); err != nil {
		w.tb.Fatal(err)
	}
}

// garbage stores a workload report that does not decode, as a hostile
// device can, and waits until the stream holds it.
func (w streamWriter) garbage(device string) {
	w.tb.Helper()
	subj, err := events.ReportSubject(device, events.ReportWorkload)
	if err != nil {
		w.tb.Fatal(err)
	}
	str, err := w.st.JetStream().Stream(w.ctx, events.StreamReports)
	if err != nil {
		w.tb.Fatal(err)
	}
	before := str.CachedInfo().State.LastSeq
	if err := w.st.JetStream().Conn().Publish(subj, []byte(`{"id":"not a ulid","type":"device.workload.status","data":{`)); err != nil {
		w.tb.Fatal(err)
	}
	testenv.Eventually(w.tb, "the garbage report is stored", 10*time.Second, func() bool {
		info, err := str.Info(w.ctx)
		return err == nil && info.State.LastSeq > before
	})
}

// TestTheIndexedExposureAnswersAsTheFullRead writes random histories and
// answers exposure questions twice: from the exposure index and the
// reports after it, and from every report (NoIndex). The answers must be
// equal, with the index written at random points of the history (the
// tail after it read from the reports), complete, and not written at all.
func TestTheIndexedExposureAnswersAsTheFullRead(t *testing.T) {
	tests := []struct {
		name  string
		seed  uint64
		index string // "random": the writer catches up at random points; "end": once at the end; "never"; "gone": no stream
		// perDevice is the writer's MaxRecordsPerDevice (0: the default).
		perDevice int
	}{
		{"an index written at random points answers as every report", 1, "random", 0},
		{"another history, an index written at random points", 2, "random", 0},
		{"a third history, an index written at random points", 3, "random", 0},
		{"a complete index answers as every report", 4, "end", 0},
		{"an empty index answers as every report", 5, "never", 0},
		{"no index stream (a server provisioned before it) answers as every report", 6, "gone", 0},
		{"a per-device limit the flooding device reaches answers as every report", 7, "random", 200},
		{"a per-device limit most devices reach answers as every report", 8, "random", 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			_, st := natstest.Provisioned(t)
			w := streamWriter{tb: t, ctx: ctx, st: st}
			writer := &ExposureIndexWriter{Store: st, Batch: 7, MaxRecordsPerDevice: tc.perDevice}
			catchUp := func() {
				if err := writer.RunToEnd(ctx); err != nil {
					t.Fatalf("index writer: %v", err)
				}
			}
			var idx func()
			if tc.index == "random" {
				idx = catchUp
			}
			middle := randomHistory(t, ctx, w, tc.seed, 400, idx)
			if tc.index == "end" {
				catchUp()
			}
			if tc.index == "gone" {
				if err := st.JetStream().DeleteStream(ctx, events.StreamIndex); err != nil {
					t.Fatal(err)
				}
			}
			if tc.index != "never" && tc.index != "gone" && writer.Written() == 0 {
				t.Fatal("the index writer wrote nothing: the test would compare the full read with itself")
			}
			if tc.index == "random" || tc.index == "end" {
				unindexed := map[string]bool{}
				for _, r := range natstest.ExposureIndex(t, ctx, st) {
					if r.Record.Kind == events.ExposureUnindexed {
						unindexed[r.Key.Device] = true
					}
				}
				t.Logf("unindexed devices: %v", unindexed)
			}
			sameExposure(t, ctx, st, true, []ExposureQuery{
				{Image: "registry.example.com/api:v1"},
				{Image: "registry.example.com/api:v2"},
				{Image: "registry.example.com/api"},
				{Image: "registry.example.com/web:v1"},
				{Deployment: "lab/api"},
				{Image: "registry.example.com/api:v3", At: middle},
				{Deployment: "lab/web", At: middle},
			})
		})
	}
}

// sameExposure fails t when a query's answer from the index differs from
// the answer of every report (an hour from now); an error is a failure
// unless errorsAllowed, and then must be the same from both.
func sameExposure(t *testing.T, ctx context.Context, st *events.Store, errorsAllowed bool, queries []ExposureQuery) {
	t.Helper()
	full, err := New(Options{Reader: st, NoIndex: true})
	if err != nil {
		t.Fatal(err)
	}
	indexed, err := New(Options{Reader: st})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().Add(time.Hour)
	for _, q := range queries {
		q.Now = now
		want, werr := full.Exposure(ctx, q)
		got, gerr := indexed.Exposure(ctx, q)
		switch {
		case !errorsAllowed && werr != nil:
			t.Fatalf("%+v: the full read: %v", q, werr)
		case !errorsAllowed && gerr != nil:
			t.Fatalf("%+v: the indexed read: %v", q, gerr)
		case fmt.Sprint(werr) != fmt.Sprint(gerr):
			t.Fatalf("%+v: error %v from the index, %v from every report", q, gerr, werr)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%+v: the indexed answer differs from every report's (-full +indexed):\n%s", q, diff)
		}
	}
}

// errKilled is the index writer's process killed between two records.
var errKilled = errors.New("killed")

// killingStore stores the first budget records appended, then fails: the
// writer's process killed at that record (within a report's records, or
// between two reports).
type killingStore struct {
	*events.Store
	budget int
}

func (k *killingStore) AppendIndex(ctx context.Context, last uint64, writes []events.IndexWrite) (uint64, error) {
	if len(writes) <= k.budget {
		k.budget -= len(writes)
		return k.Store.AppendIndex(ctx, last, writes)
	}
	n, err := k.Store.AppendIndex(ctx, last, writes[:k.budget])
	k.budget = 0
	if err != nil {
		return n, err
	}
	return n, errKilled
}

// emptyIndex deletes the exposure index and provisions it again, empty:
// the test waits for the deletion and for the new stream to be empty,
// since a loaded server may still answer for the old one.
func emptyIndex(t *testing.T, ctx context.Context, st *events.Store) {
	t.Helper()
	if err := st.JetStream().DeleteStream(ctx, events.StreamIndex); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyErr(t, "the index stream deleted", 30*time.Second, func() error {
		if _, err := st.JetStream().Stream(ctx, events.StreamIndex); !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("the stream is still there (%v)", err)
		}
		return nil
	})
	if err := events.Provision(ctx, st.JetStream(), events.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.EventuallyErr(t, "an empty index", 30*time.Second, func() error {
		n, err := st.IndexLastSequence(ctx)
		if err == nil && n != 0 {
			err = fmt.Errorf("the index holds %d records", n)
		}
		return err
	})
}

// TestTheIndexWriterKilledAtAnyRecordResumesWithoutLossOrDuplicate builds
// the exposure index of a random history once without a stop, then, for
// every record of it, again from an empty index with the writer killed
// after that many records (within a batch, within one report's records)
// and a new writer resuming: the index must be the same, record for
// record. A second writer appending after the index moved under it gets
// ErrIndexConflict and writes nothing.
func TestTheIndexWriterKilledAtAnyRecordResumesWithoutLossOrDuplicate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	w := streamWriter{tb: t, ctx: ctx, st: st}
	randomHistory(t, ctx, w, 11, 150, nil)
	if err := (&ExposureIndexWriter{Store: st}).RunToEnd(ctx); err != nil {
		t.Fatal(err)
	}
	want := natstest.ExposureIndex(t, ctx, st)
	if len(want) < 20 {
		t.Fatalf("the history indexes into %d records: too few to kill the writer anywhere interesting", len(want))
	}
	// A stale writer: the index moved past the sequence it expects.
	if _, err := st.AppendIndex(ctx, uint64(len(want)-1), []events.IndexWrite{{Subject: want[0].Subject, Record: want[0].Record}}); !errors.Is(err, events.ErrIndexConflict) {
		t.Fatalf("a stale writer's append: %v, want ErrIndexConflict", err)
	}
	for k := 1; k < len(want); k++ {
		emptyIndex(t, ctx, st)
		killed := &ExposureIndexWriter{Store: &killingStore{Store: st, budget: k}, Batch: 1 + k%5}
		if err := killed.RunToEnd(ctx); !errors.Is(err, errKilled) {
			t.Fatalf("killed after %d records: the writer returned %v", k, err)
		}
		if err := (&ExposureIndexWriter{Store: st, Batch: 3}).RunToEnd(ctx); err != nil {
			t.Fatalf("resuming after %d records: %v", k, err)
		}
		got := natstest.ExposureIndex(t, ctx, st)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("killed after %d records, the resumed index differs (-uninterrupted +resumed):\n%s", k, diff)
		}
	}
}

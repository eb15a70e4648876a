package rollouts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/deployments"
	"github.com/nationtech/harmony-fleet/operator/internal/intent"
	"github.com/nationtech/harmony-fleet/operator/internal/runnertest"
	devtargets "github.com/nationtech/harmony-fleet/operator/internal/targets"
	"github.com/nationtech/harmony-fleet/score"
)

// statusRecorder keeps the last status the rollout runner wrote of each
// Deployment.
type statusRecorder struct {
	runnertest.Statuses[fleetv1.DeploymentStatus]
}

func (s *statusRecorder) WriteDeploymentStatus(_ context.Context, namespace, name string, st fleetv1.DeploymentStatus) error {
	s.Put(namespace, name, st)
	return nil
}

func TestARevisionOfAHundredThousandTargetsIsChunkedAppendedOnceReleasedToAllAndRebuilt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	const n, canaries = 100000, 100
	targets := make([]string, n)
	for i := range targets {
		targets[i] = fmt.Sprintf("edge-device-%06d", i)
	}
	res := devtargets.Resolution{Targets: targets, Canaries: targets[:canaries:canaries]}
	d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: "api", UID: "uid-1", Generation: 1},
		Spec: fleetv1.DeploymentSpec{Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
			Name: "api", Image: "registry.example.com/api:v1"}}}}}}
	subject, err := events.DeploymentIntentSubject(d.Namespace, d.Name)
	if err != nil {
		t.Fatal(err)
	}
	head := func() intent.Head {
		t.Helper()
		h, err := intent.ReadHead(ctx, st, st, nil, log, subject)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}

	// An operator crashes after two chunks: orphans, and no revision.
	crashed, _, err := deployments.RevisionEvents(d, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(crashed) < 3 {
		t.Fatalf("%d targets make %d events, want chunks and a revision", n, len(crashed))
	}
	if err := deployments.AppendRevision(ctx, st, crashed[:2], 0); err != nil {
		t.Fatal(err)
	}
	h := head()
	if _, done := intent.AppendedRevision(h.Last, d); done {
		t.Fatal("orphan chunks read as an appended revision")
	}
	// A racing operator that read the subject before them loses; the next
	// attempt reads the new head and appends the whole revision.
	racer, _, _ := deployments.RevisionEvents(d, res)
	if err := deployments.AppendRevision(ctx, st, racer, 0); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("a racing append from a stale head: %v, want a conflict", err)
	}
	evs, want, err := deployments.RevisionEvents(d, res)
	if err != nil {
		t.Fatal(err)
	}
	if err := deployments.AppendRevision(ctx, st, evs, h.Seq); err != nil {
		t.Fatal(err)
	}
	h = head()
	rev, done := intent.AppendedRevision(h.Last, d)
	if !done || rev.TargetChunks != len(evs)-1 || rev.TargetsDigest != events.TargetsDigest(targets) {
		t.Fatalf("head after the append: %+v appended %v, want the revision naming %d chunks", rev.RevisionID, done, len(evs)-1)
	}
	for _, ev := range evs {
		if b, _ := ev.Marshal(); len(b) > events.MaxEventSize {
			t.Fatalf("a %s event of %d bytes", ev.Type, len(b))
		}
	}

	// A reader assembles the revision whole, ignoring the orphans.
	whole := assembledRevisions(t, ctx, st, subject)
	if len(whole) != 1 {
		t.Fatalf("%d revisions assembled, want 1", len(whole))
	}
	if diff := cmp.Diff(want, whole[0]); diff != "" {
		t.Fatalf("the assembled revision differs from the frozen one (-want +got):\n%s", diff)
	}

	// The rollout runner folds it whole and hands the canaries their
	// intent; once they converge, every target gets it (the release
	// lists none: they do not fit in one event). A runner rebuilding from
	// the first event agrees.
	w := &runnerWorld{t: t, ctx: ctx, st: st, kv: kv, log: log, wait: time.Minute}
	live := &statusRecorder{}
	stop := w.run(live)
	st1 := w.waitStatus(live, "big/api", "phase Canary", phase(fleetv1.PhaseCanary))
	if st1.Counts.Total != n || st1.Counts.Canaries != canaries {
		t.Errorf("counts %+v, want %d targets and %d canaries", st1.Counts, n, canaries)
	}
	w.keyCount(canaries)
	w.intentOf(targets[0], want.RevisionID)
	w.converged(want, "big", "api", res.Canaries)
	st1 = w.waitStatus(live, "big/api", "phase Progressing", phase(fleetv1.PhaseProgressing))
	w.keyCount(n)
	for _, d := range []string{targets[canaries], targets[n/2], targets[n-1]} {
		w.intentOf(d, want.RevisionID)
	}
	stop()

	rebuilt := &statusRecorder{}
	stop = w.run(rebuilt)
	st2 := w.waitStatus(rebuilt, "big/api", "phase Progressing", phase(fleetv1.PhaseProgressing))
	w.keyCount(n)
	stop()
	if diff := cmp.Diff(st1.Counts, st2.Counts); diff != "" || !cmp.Equal(st1.Revision, st2.Revision) {
		t.Errorf("the rebuild differs from the live state (-live +rebuilt):\n%s", diff)
	}

	// A runner that resumed from a checkpoint taken between the chunks
	// and the revision reads the chunks again from the store.
	s := newRunnerState()
	s.refetch = func(rec events.Record) (events.Event, error) { return reassemble(ctx, st, rec) }
	last, err := st.Last(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	s.seqs[sourceIntent] = last.Sequence - 1
	if f := s.fold(sourceIntent, last); f.skip != nil || len(s.rollouts[depKey{"big", "api"}].Targets) != n {
		t.Errorf("the resumed fold has %d targets (skip %v), want %d", len(s.rollouts[depKey{"big", "api"}].Targets), f.skip, n)
	}
}

// assembledRevisions reads subject from its start through an
// events.RevisionAssembler, as a reader does, and returns the revisions it
// assembles whole; an error fails the test.
func assembledRevisions(t *testing.T, ctx context.Context, st *events.Store, subject string) []events.DeploymentRevisionCreated {
	t.Helper()
	var a events.RevisionAssembler
	var whole []events.DeploymentRevisionCreated
	for rec, err := range st.Replay(ctx, subject, events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		ev, ok, err := a.Add(rec.Event)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got, err := events.Decode[events.DeploymentRevisionCreated](ev)
			if err != nil {
				t.Fatal(err)
			}
			whole = append(whole, got)
		}
	}
	return whole
}

package taskruns

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
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/intent"
	"github.com/nationtech/harmony-fleet/operator/internal/runnertest"
	devtargets "github.com/nationtech/harmony-fleet/operator/internal/targets"
	"github.com/nationtech/harmony-fleet/projections"
)

// statusRecorder keeps the last status the TaskRun runner wrote of each
// TaskRun.
type statusRecorder struct {
	runnertest.Statuses[fleetv1.TaskRunStatus]
}

func (s *statusRecorder) WriteTaskRunStatus(_ context.Context, namespace, name string, st fleetv1.TaskRunStatus) error {
	s.Put(namespace, name, st)
	return nil
}

func TestATaskRunThatFitsInOneEventKeepsItsBytes(t *testing.T) {
	tests := []struct {
		name string
		tr   *fleetv1.TaskRun
		want string
	}{
		{
			name: "a system upgrade of three devices",
			tr: &fleetv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "upgrade", UID: "uid-1", Generation: 1},
				Spec: fleetv1.TaskRunSpec{Task: fleetv1.TaskSystemUpgrade}},
			want: `{"uid":"uid-1","generation":1,"task":"system-upgrade","targets":["rpi-1","rpi-2","rpi-3"]}`,
		},
		{
			name: "an agent upgrade with a maintenance window",
			tr: &fleetv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Namespace: "ops", Name: "agent", UID: "uid-2", Generation: 1},
				Spec: fleetv1.TaskRunSpec{Task: fleetv1.TaskAgentUpgrade,
					Agent:             &fleetv1.AgentArtifact{URL: "https://downloads.example.com/fleet-agent", SHA256: "ab", Version: "v2.0.0"},
					MaintenanceWindow: &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "2h"}}},
			want: `{"uid":"uid-2","generation":1,"task":"agent-upgrade","targets":["rpi-1","rpi-2","rpi-3"],` +
				`"agent":{"url":"https://downloads.example.com/fleet-agent","sha256":"ab","version":"v2.0.0"},"window":{"start":"02:00","duration":"2h"}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := taskRunEvents(tt.tr, devtargets.Resolution{Targets: []string{"rpi-1", "rpi-2", "rpi-3"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) != 1 || evs[0].Type != events.TypeTaskRunCreated {
				t.Fatalf("%d events, want one taskrun.created", len(evs))
			}
			if diff := cmp.Diff(tt.want, string(evs[0].Data)); diff != "" {
				t.Errorf("the creation's data (-want +got):\n%s", diff)
			}
		})
	}
}

func TestATaskRunOfAHundredThousandTargetsIsChunkedAppendedOnceAndRebuilt(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	const n = 100000
	targets := make([]string, n)
	for i := range targets {
		targets[i] = fmt.Sprintf("edge-device-%06d", i)
	}
	res := devtargets.Resolution{Targets: targets}
	tr := &fleetv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Namespace: "big", Name: "upgrade", UID: "uid-1", Generation: 1},
		Spec: fleetv1.TaskRunSpec{Task: fleetv1.TaskSystemUpgrade}}
	subject, err := events.TaskRunIntentSubject(tr.Namespace, tr.Name)
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

	// An operator crashes after two chunks: orphans, and no creation.
	crashed, err := taskRunEvents(tr, res)
	if err != nil {
		t.Fatal(err)
	}
	if len(crashed) < 3 {
		t.Fatalf("%d targets make %d events, want chunks and a creation", n, len(crashed))
	}
	if err := intent.AppendInOrder(ctx, st, crashed[:2], 0); err != nil {
		t.Fatal(err)
	}
	h := head()
	if _, done := taskRunCreated(h.Last, tr); done {
		t.Fatal("orphan chunks read as an appended creation")
	}
	// A racing operator that read the subject before them loses; the next
	// attempt reads the new head and appends the whole creation.
	racer, _ := taskRunEvents(tr, res)
	if err := intent.AppendInOrder(ctx, st, racer, 0); !errors.Is(err, events.ErrConflict) {
		t.Fatalf("a racing append from a stale head: %v, want a conflict", err)
	}
	evs, err := taskRunEvents(tr, res)
	if err != nil {
		t.Fatal(err)
	}
	if err := intent.AppendInOrder(ctx, st, evs, h.Seq); err != nil {
		t.Fatal(err)
	}
	h = head()
	created, done := taskRunCreated(h.Last, tr)
	if !done || created.TargetChunks != len(evs)-1 || created.TargetsDigest != events.TargetsDigest(targets) || len(created.Targets) != 0 {
		t.Fatalf("head after the append: appended %v, %d chunks named, want the creation naming %d chunks", done, created.TargetChunks, len(evs)-1)
	}
	for _, ev := range evs {
		if b, _ := ev.Marshal(); len(b) > events.MaxEventSize {
			t.Fatalf("a %s event of %d bytes", ev.Type, len(b))
		}
	}
	// The controller restarted after the append reads the targets back
	// for its condition.
	got, err := wholeTargets(ctx, st, subject, created, h.Last.Sequence)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(targets, got); diff != "" {
		t.Fatalf("the targets read back (-want +got):\n%s", diff)
	}

	// Every target's fleet-intent value gets the task, as the rollout
	// runner folds it (through an events.RevisionAssembler); the orphans
	// add nothing.
	var a events.RevisionAssembler
	in := projections.NewIntent()
	changed := map[string]bool{}
	for rec, err := range st.Replay(ctx, subject, events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		whole, ok, err := a.Add(rec.Event)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			for _, d := range in.Apply(whole) {
				changed[d] = true
			}
		}
	}
	if len(changed) != n {
		t.Fatalf("%d devices' intent changed, want %d", len(changed), n)
	}
	if v, ok := in.Value(targets[n-1]); !ok || len(v) == 0 {
		t.Errorf("the last target has no intent value")
	}

	// The TaskRun runner folds the whole creation: a status of n targets,
	// and a report of the last target counts. A second runner rebuilds the
	// same status from the first event.
	run := func(status *statusRecorder) (stop func()) {
		return runnertest.Start(t, ctx, "taskrun runner", (&Runner{Reader: st, Status: status, Log: log, StatusInterval: 20 * time.Millisecond}).Run)
	}
	wait := func(status *statusRecorder, what string, cond func(fleetv1.TaskRunStatus) bool) fleetv1.TaskRunStatus {
		t.Helper()
		var got fleetv1.TaskRunStatus
		if err := testenv.Poll(ctx, time.Minute, func() bool {
			s, ok := status.Get("big/upgrade")
			got = s
			return ok && cond(s)
		}); err != nil {
			t.Fatalf("%v waiting for %s; last status %+v", err, what, got.Counts)
		}
		return got
	}
	live := &statusRecorder{}
	stop := run(live)
	wait(live, "the status of every target", func(s fleetv1.TaskRunStatus) bool { return s.Counts.Targets == n })
	ev, err := events.New(events.Keys{Device: targets[n-1]}, events.TaskStatus{Namespace: "big", TaskRun: "upgrade", UID: "uid-1",
		Task: string(fleetv1.TaskSystemUpgrade), Phase: events.TaskSucceeded, Since: time.Now().UTC()}, events.WithCorrelation("uid-1", 1))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Report(ctx, ev); err != nil {
		t.Fatal(err)
	}
	st1 := wait(live, "the last target's success", func(s fleetv1.TaskRunStatus) bool { return s.Counts.Succeeded == 1 })
	stop()

	rebuilt := &statusRecorder{}
	stop = run(rebuilt)
	st2 := wait(rebuilt, "the rebuilt status", func(s fleetv1.TaskRunStatus) bool { return s.Counts.Succeeded == 1 })
	stop()
	if diff := cmp.Diff(st1.Counts, st2.Counts); diff != "" {
		t.Errorf("the rebuild differs from the live state (-live +rebuilt):\n%s", diff)
	}
}

package taskruns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/intent"
	"github.com/nationtech/harmony-fleet/operator/internal/kstatus"
	"github.com/nationtech/harmony-fleet/projections"
	projrunner "github.com/nationtech/harmony-fleet/projections/runner"
)

// FieldOwnerStatus is the server-side-apply field manager of the
// TaskRun status fields the TaskRun runner owns: observedGeneration, phase,
// counts, latestFailure, results and the Ready condition.
const FieldOwnerStatus = "fleet-operator-taskrun-status"

// Filters the TaskRun runner reads, and their sources' indexes in its
// runner.
const (
	filterTaskRunIntent = "fleet.intent.taskrun.*.*"
	filterTaskReports   = "fleet.report.*.task"

	sourceTaskRunIntent = 0
	sourceTaskReports   = 1
)

// StatusWriter receives the status the TaskRun runner folded for one
// TaskRun. A TaskRun that no longer exists is not an error.
type StatusWriter interface {
	WriteTaskRunStatus(ctx context.Context, namespace, name string, st fleetv1.TaskRunStatus) error
}

// KubeStatus writes the TaskRun runner's status to the Kubernetes API: a
// server-side apply of the fields it owns (field manager FieldOwnerStatus),
// forcing ownership.
type KubeStatus struct {
	Client client.Client
}

// WriteTaskRunStatus applies st to TaskRun namespace/name (field manager
// FieldOwnerStatus). A TaskRun that is gone is skipped.
func (k KubeStatus) WriteTaskRunStatus(ctx context.Context, namespace, name string, st fleetv1.TaskRunStatus) error {
	err := kstatus.Apply(ctx, k.Client, "TaskRun", namespace, name, &st, FieldOwnerStatus)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Runner folds TaskRun intent and the devices' task reports
// (projections.TaskRuns) into each TaskRun's status, and writes a status when it
// changed, at most once per StatusInterval per TaskRun.
//
// It keeps no state of its own: every start rebuilds from the first event.
// The intent stream is read to its end before the first report, then both
// are followed; reports are folded in the report stream's order, so a
// rebuild gives the same status as the live fold.
//
// Device input is data, never control: a report that does not decode is
// skipped and counted on Skips; a report about a TaskRun UID the device is
// not a frozen target of, of another UID, or with an unknown phase is
// ignored and counted (Ignored). The device a report is about is the one
// its subject names.
type Runner struct {
	Reader intent.Reader
	// Status receives each changed TaskRun's status. Required: KubeStatus
	// writes it to the Kubernetes API.
	Status StatusWriter
	Log    *slog.Logger
	// StatusInterval is the least time between two status writes of one
	// TaskRun. Default 2s.
	StatusInterval time.Duration
	// Skips counts the records that do not decode. Nil: only logged.
	Skips *events.SkipCounter

	ignored atomic.Uint64
}

// Ignored returns how many task reports the runner ignored: reports that
// decode but are not about a frozen target of the TaskRun UID they name,
// name an unknown phase, come after the device's result, or were dropped
// at the bound on reports of UIDs not created yet.
func (r *Runner) Ignored() uint64 { return r.ignored.Load() }

// Run runs until ctx ends, then returns after its readers stopped.
func (r *Runner) Run(ctx context.Context) error {
	if r.Status == nil {
		return errors.New("taskrun runner: no status writer: set Status (KubeStatus writes to the Kubernetes API)")
	}
	if r.Log == nil {
		r.Log = slog.New(slog.DiscardHandler)
	}
	interval := r.StatusInterval
	if interval == 0 {
		interval = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	in := make(chan projrunner.Msg, 1024)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	// The reports are read only after the intent's history: a report
	// always finds the creation of its TaskRun if it was stored before.
	reads := &projrunner.Runner{Name: "taskrun runner", Reader: r.Reader, Log: r.Log, Sources: []projrunner.Source{
		sourceTaskRunIntent: {Filters: []string{filterTaskRunIntent}},
		sourceTaskReports:   {Filters: []string{filterTaskReports}, AfterPrevious: true},
	}}
	wg.Go(func() { reads.Run(ctx, in) })

	f := projections.NewTaskRuns()
	var chunks events.RevisionAssembler // every start reads the intent from its first event
	written := map[projections.TaskRunKey]string{}
	live := false
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if live {
				r.write(ctx, f, written)
			}
		case m := <-in:
			switch {
			case m.Err != nil:
				return fmt.Errorf("taskrun runner: %w", m.Err)
			case m.Caught:
				if m.Live {
					live = true
					r.Log.InfoContext(ctx, "taskrun runner caught up", "taskruns", f.Len())
					r.write(ctx, f, written)
				}
			case m.Skip != nil:
				r.Skips.Skip(ctx, r.Log, m.Skip)
			default:
				r.fold(ctx, f, &chunks, m)
			}
		}
	}
}

// fold applies one record and counts what the fold ignored. Intent goes
// through chunks first: a chunked creation is folded whole after its
// chunks, and a chunk alone folds nothing.
func (r *Runner) fold(ctx context.Context, f *projections.TaskRuns, chunks *events.RevisionAssembler, m projrunner.Msg) {
	var why string
	var err error
	before := f.Ignored()
	if m.Source == sourceTaskRunIntent {
		whole, ok, cerr := chunks.Add(m.Record.Event)
		switch {
		case cerr != nil:
			err = cerr
		case ok:
			rec := m.Record
			rec.Event = whole
			err = f.ApplyIntent(rec)
		}
	} else {
		why, err = f.ApplyReport(m.Record)
	}
	if err != nil {
		r.Skips.Skip(ctx, r.Log, events.InvalidData(m.Record, err))
		return
	}
	if n := f.Ignored() - before; n > 0 && r.ignored.Add(n) == n { // the first
		r.Log.WarnContext(ctx, "a task report ignored (later ones are counted, not logged)", "reason", why,
			"subject", m.Record.Subject, "seq", m.Record.Sequence)
	}
}

// write hands the status of every TaskRun that changed to the writer; one
// that fails stays dirty for the next tick.
func (r *Runner) write(ctx context.Context, f *projections.TaskRuns, written map[projections.TaskRunKey]string) {
	for _, k := range f.TakeDirty() {
		st, _ := f.Status(k)
		b, _ := json.Marshal(st)
		if written[k] == string(b) {
			continue
		}
		if err := r.Status.WriteTaskRunStatus(ctx, k.Namespace, k.Name, st); err != nil {
			if ctx.Err() == nil {
				r.Log.ErrorContext(ctx, "write taskrun status", "taskrun", k.Namespace+"/"+k.Name, "error", err)
			}
			f.MarkDirty(k)
			continue
		}
		written[k] = string(b)
	}
	for k := range written {
		if f.UID(k) == "" {
			delete(written, k)
		}
	}
}

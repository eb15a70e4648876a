package rollouts

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/operator/internal/intent"
	"github.com/nationtech/harmony-fleet/projections"
	projrunner "github.com/nationtech/harmony-fleet/projections/runner"
)

// FieldOwnerRollouts is the server-side-apply field manager of the status
// fields the rollout runner owns: revision, phase, counts, latestFailure and
// the Ready condition.
const FieldOwnerRollouts = "fleet-operator-rollouts"

// Filters the rollout runner reads, by source: one ordered consumer per
// source, whatever the number of its filters (ADR 0019 keeps three).
var runnerFilters = [3][]string{
	// Deployment and TaskRun intent: both kinds of entry go into one
	// fleet-intent value per device.
	sourceIntent:   {"fleet.intent.*.*.*"},
	sourceRollouts: {"fleet.rollout.deployment.*.*"},
	// Workload and health reports in the order they were stored: a
	// device's degraded report never passes the workload report before
	// it.
	sourceReports: {"fleet.report.*.workload", "fleet.report.*.health", "fleet.report.*.fetch"},
}

// RolloutRunner folds Deployment intent, rollout transitions and workload
// reports (rollout_fold.go); appends the rollout state machine's decisions
// (optimistic concurrency on each Deployment's rollout subject, so several
// runners never duplicate a transition); and hands what changed to its
// sinks (rollout_sinks.go): every device's fleet-intent KV value, and each
// Deployment's status, coalesced per Deployment.
//
// On start it rebuilds its state from the first event (three ordered
// consumers, no server-side state), or from its checkpoint, then follows
// live.
//
// Device input is data, never control: a record that does not decode (on
// any of the three streams) is skipped, counted on Skips and logged, and
// the runner's position in that stream moves past it, so neither the live
// runner nor a restart from the checkpoint ever stops on it. The device a
// report is about is the one in the subject it was stored on (the reader
// refuses an envelope that names another).
type RolloutRunner struct {
	// Store appends the transitions the runner decides.
	Store  intent.Store
	Reader intent.Reader
	// KV is the fleet-intent bucket.
	KV jetstream.KeyValue
	// JS, when set, publishes the bucket's puts asynchronously (a window
	// of acknowledgements in flight); nil: the Store's (an *events.Store),
	// else one synchronous put per device.
	JS jetstream.JetStream
	// Status receives each changed Deployment's status, at most once per
	// StatusInterval. Required: KubeStatus writes it to the Kubernetes API.
	Status DeploymentStatusWriter
	Log    *slog.Logger
	// StatusInterval is the least time between two status writes of one
	// Deployment. Default 2s.
	StatusInterval time.Duration
	// Checkpoints, when set, is where the runner keeps a snapshot of its
	// folds and the stream positions they cover (object CheckpointObject):
	// a restart resumes from it instead of folding every event again. Nil:
	// rebuild from zero on every start.
	Checkpoints jetstream.ObjectStore
	// CheckpointInterval is how often a changed state is written. Default
	// 30s; the state is also written when the runner stops.
	CheckpointInterval time.Duration
	// Skips counts the records the runner skips because they do not decode
	// (a device's garbage on its report subject, a JetStream answer aimed
	// at a stream). Nil: they are only logged.
	Skips *events.SkipCounter
	// Metrics, when set, records what the runner does (fleet_rollout_*).
	Metrics *Metrics
	// TargetTimeout is how long a frozen target may go without a result
	// (Converged or Failed) of a revision after it was handed it, before
	// the runner removes it from the revision's accounting. Default
	// DefaultTargetTimeout.
	TargetTimeout time.Duration
	// ProgressDeadline is how long a rollout may make no progress before
	// its Progressing condition turns False (ProgressDeadlineExceeded),
	// for a revision that sets no spec.rollout.progressDeadline of its
	// own. It appends no event and decides nothing. Zero:
	// DefaultProgressDeadline; negative: none (only revisions that set one
	// have a deadline).
	ProgressDeadline time.Duration
	// Now, when set, is the clock the progress deadline is judged by
	// (tests); nil: time.Now.
	Now func() time.Time
	// Removals, when set, tells the runner of Devices deleted or
	// quarantined (TargetWatch): each is removed from the accounting of
	// every rollout in progress in its namespace that has it as a target.
	Removals <-chan TargetRemoval
	// Follows, when set, tells the runner how Devices stand to the Follow
	// Deployments of their namespace (operator/followers, ADR 0026): it appends
	// their joins and departures. Removals no longer apply to a Follow
	// revision: a deleted or quarantined device leaves it through Follows.
	Follows <-chan FollowChange
	// FollowDebounce is how long a target of a Follow revision must not
	// have matched after a label change before it leaves (a quarantine, a
	// deletion, a duplicate mark or a group leave at once; matching again
	// within it cancels the departure). Default DefaultFollowDebounce.
	FollowDebounce time.Duration
	// Stamp, when set, is applied last to the transitions the runner
	// builds (Options.EventStamp, tests only).
	Stamp events.Option
}

// DefaultTargetTimeout is RolloutRunner.TargetTimeout when zero.
const DefaultTargetTimeout = time.Hour

// DefaultProgressDeadline is RolloutRunner.ProgressDeadline when zero.
const DefaultProgressDeadline = 10 * time.Minute

// TargetRemoval is a Device that can no longer take part in a rollout.
type TargetRemoval struct {
	Namespace, Device string
	// Reason is why: "deleted" or "quarantined".
	Reason string
}

// runner is one Run: the fold and its sinks.
type runner struct {
	*RolloutRunner
	s      *runnerState
	intent *intentWriter
	ckpt   checkpoints
	// pending are the removals (Removals) not yet appended to every
	// rollout they concern.
	pending map[TargetRemoval]bool
	// undecided are the Deployments whose last decision failed to append
	// for another reason than a conflict (no answer from the stream while
	// a cluster elects a new leader, a lost connection): decided again on
	// the next tick, as no event may come to trigger it.
	undecided map[depKey]bool
	// follows are the Follow changes (Follows) not settled yet, by
	// Deployment and device.
	follows map[depKey]map[string]*followWant
}

// Run runs until ctx ends.
func (r *RolloutRunner) Run(ctx context.Context) error {
	if r.Status == nil {
		return errors.New("rollout runner: no status writer: set Status (KubeStatus writes to the Kubernetes API)")
	}
	if r.StatusInterval == 0 {
		r.StatusInterval = 2 * time.Second
	}
	if r.CheckpointInterval == 0 {
		r.CheckpointInterval = 30 * time.Second
	}
	if r.TargetTimeout < 0 {
		return fmt.Errorf("rollout runner: target timeout is %s: use a positive duration (default %s)", r.TargetTimeout, DefaultTargetTimeout)
	}
	if r.TargetTimeout == 0 {
		r.TargetTimeout = DefaultTargetTimeout
	}
	if r.ProgressDeadline == 0 {
		r.ProgressDeadline = DefaultProgressDeadline
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.FollowDebounce < 0 {
		return fmt.Errorf("rollout runner: follow debounce is %s: use a positive duration (default %s)", r.FollowDebounce, DefaultFollowDebounce)
	}
	if r.FollowDebounce == 0 {
		r.FollowDebounce = DefaultFollowDebounce
	}
	if js, ok := r.Store.(interface{ JetStream() jetstream.JetStream }); ok && r.JS == nil {
		r.JS = js.JetStream()
	}
	run := &runner{RolloutRunner: r, s: newRunnerState(), pending: map[TargetRemoval]bool{}, undecided: map[depKey]bool{},
		follows: map[depKey]map[string]*followWant{},
		intent:  &intentWriter{kv: r.KV, js: r.JS, log: r.Log, metrics: r.Metrics, written: map[string]kvSlot{}},
		ckpt:    checkpoints{store: r.Checkpoints, log: r.Log, metrics: r.Metrics}}
	r.Metrics.setLive(false)
	defer r.Metrics.setLive(false)
	if r.Checkpoints != nil {
		r.Metrics.checkpointed(time.Now()) // the age counts from the start until the first
	}
	return run.run(ctx)
}

func (r *runner) run(ctx context.Context) error {
	s := r.s
	r.ckpt.restore(ctx, s)
	defer r.ckpt.save(s)
	s.refetch = func(rec events.Record) (events.Event, error) { return reassemble(ctx, r.Reader, rec) }

	ctx, cancel := context.WithCancel(ctx)
	in := make(chan projrunner.Msg, 1024)
	var wg sync.WaitGroup
	defer func() {
		cancel() // readers stop on it; then wait for them
		wg.Wait()
	}()
	// One consumer per source, each from the checkpoint's position.
	reads := &projrunner.Runner{Name: "rollout runner", Reader: r.Reader, Log: r.Log}
	for i, filters := range runnerFilters {
		reads.Sources = append(reads.Sources, projrunner.Source{Filters: filters, After: s.seqs[i]})
	}
	wg.Go(func() { reads.Run(ctx, in) })
	// Writes to fleet-intent by anyone else are repaired (intentWriter.foreign).
	kvWrites := make(chan kvUpdate, 1024)
	if r.intent.js != nil {
		if err := r.intent.watch(ctx, kvWrites); err != nil {
			if ctx.Err() != nil {
				return nil // stopped while starting: a stop, not a failure
			}
			return err
		}
	}
	ckpt := time.NewTicker(r.CheckpointInterval)
	defer ckpt.Stop()
	tick := time.NewTicker(r.StatusInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if s.live {
				r.retry(ctx) // also the fleet-intent writes that failed or conflicted
				r.endSoaks(ctx, time.Now())
				r.removeTargets(ctx, time.Now())
				r.followAll(ctx, time.Now())
				r.progressDeadlines(ctx, r.Now())
				writeStatus(ctx, r.Status, r.Log, r.Metrics, s, r.Now(), r.ProgressDeadline)
			}
		case u := <-kvWrites:
			if s.live && r.intent.foreign(ctx, u, s.dirtyKV) {
				r.Log.WarnContext(ctx, "fleet-intent written by another writer: putting the fold's value back on the next tick", "device", u.key, "revision", u.rev)
			}
		case rm := <-r.Removals:
			// Kept until every rollout it concerns has it removed: acted
			// on once live, retried on the next tick after a conflict.
			r.pending[rm] = true
			if s.live {
				r.removeTargets(ctx, time.Now())
			}
		case ch := <-r.Follows:
			// Kept until settled: acted on once live (a join at once, a
			// departure after its debounce), retried on the next tick
			// after a conflict.
			k := r.noteFollow(ch, time.Now())
			if s.live {
				r.follow(ctx, k, time.Now())
			}
		case <-ckpt.C:
			if s.live && s.changed {
				r.ckpt.save(s)
			}
		case m := <-in:
			switch {
			case m.Err != nil:
				return fmt.Errorf("rollout runner: %w", m.Err)
			case m.Caught:
				if m.Live {
					if err := r.goLive(ctx); err != nil {
						if ctx.Err() != nil {
							return nil // stopped while catching up
						}
						return err
					}
				}
			case m.Skip != nil:
				r.outcome(ctx, s.pass(m.Source, m.Skip), m)
			default:
				r.outcome(ctx, s.fold(m.Source, m.Record), m)
				if s.live {
					r.intent.flush(ctx, s.intent, s.dirtyKV)
				}
			}
		}
	}
}

// retry decides again the Deployments whose last append failed and
// writes the fleet-intent values whose puts failed: nothing else triggers
// them when no new event comes (the failure was the stream's, not a
// conflict). An append whose answer was lost but that was stored is not
// appended twice: the retry expects the subject's last sequence and gets
// a conflict, and the stored event is folded when it is read.
func (r *runner) retry(ctx context.Context) {
	for _, k := range r.s.sortedKeys() {
		if r.undecided[k] {
			delete(r.undecided, k)
			r.decide(ctx, k)
		}
	}
	if len(r.s.dirtyKV) > 0 {
		r.intent.flush(ctx, r.s.intent, r.s.dirtyKV)
	}
}

// goLive runs once every source caught up with its history: the bucket is
// made equal to the fold, the state machine decides every Deployment, and
// every status is written.
func (r *runner) goLive(ctx context.Context) error {
	s := r.s
	s.live = true
	// Health reports were folded whatever the intent said while the
	// streams were read side by side: keep those of devices that hold
	// the revision they name.
	for k := range s.health {
		s.pruneHealth(k, time.Time{})
	}
	if err := r.intent.sync(ctx, s.intent, s.dirtyKV); err != nil {
		return err
	}
	for _, k := range s.sortedKeys() {
		r.decide(ctx, k)
	}
	r.removeTargets(ctx, time.Now())
	r.followAll(ctx, time.Now())
	r.progressDeadlines(ctx, r.Now())
	writeStatus(ctx, r.Status, r.Log, r.Metrics, s, r.Now(), r.ProgressDeadline)
	r.Metrics.setLive(true)
	r.Log.InfoContext(ctx, "rollout runner caught up", "deployments", len(s.rollouts))
	return nil
}

// outcome acts on what folding m did: a skip is counted and logged, the
// first drop logged, and a changed Deployment decided again once live.
func (r *runner) outcome(ctx context.Context, f folded, m projrunner.Msg) {
	if f.skip != nil {
		r.Skips.Skip(ctx, r.Log, f.skip)
	}
	if m.Source == sourceReports && m.Skip == nil && f.skip == nil {
		switch {
		case f.dropped != "":
			r.Metrics.report("dropped")
		case f.decide || f.health:
			r.Metrics.report("folded")
		}
	}
	if f.health && f.dropped != "" && r.s.healthDropped == 1 {
		r.Log.WarnContext(ctx, "a health report dropped: the runner accepts one only from a device that holds the revision it names; later drops are counted, not logged",
			"stream", m.Record.Stream, "subject", m.Record.Subject, "seq", m.Record.Sequence)
	}
	if !f.health && f.dropped != "" && r.s.dropped == 1 {
		r.Log.WarnContext(ctx, "a report dropped: the runner keeps reports for a bounded number of "+f.dropped+" (a lagging runner, or a device naming Deployments or revisions that do not exist); later drops are counted, not logged",
			"stream", m.Record.Stream, "subject", m.Record.Subject, "seq", m.Record.Sequence)
	}
	if f.decide && r.s.live {
		r.decide(ctx, f.key)
		if len(r.follows[f.key]) > 0 {
			r.follow(ctx, f.key, time.Now()) // changes that waited for this revision
		}
	}
}

// removeTargets appends a rollout.target-removed transition for every
// frozen target of a rollout in progress that can no longer take part: its
// Device was deleted or quarantined (pending), or it has had no result of
// the revision for TargetTimeout since it was handed it (judged at now, the
// operator's clock against the operator's own transition times). Then the
// state machine decides again.
func (r *runner) removeTargets(ctx context.Context, now time.Time) {
	s := r.s
	for _, k := range s.sortedKeys() {
		ro := s.rollouts[k]
		if ro.Terminal() {
			continue
		}
		var out []projections.RemovedTarget
		for rm := range r.pending {
			// A Follow revision's device leaves through the follow
			// changes, which take the revision back (ADR 0026).
			if rm.Namespace == k.ns && ro.IsTarget(rm.Device) && !ro.Follow {
				out = append(out, projections.RemovedTarget{Device: rm.Device, Reason: "Device " + rm.Reason})
			}
		}
		out = append(out, silentTargets(ro, now, r.TargetTimeout)...)
		if len(out) == 0 {
			continue
		}
		slices.SortFunc(out, func(a, b projections.RemovedTarget) int { return strings.Compare(a.Device, b.Device) })
		out = slices.CompactFunc(out, func(a, b projections.RemovedTarget) bool { return a.Device == b.Device })
		for _, rm := range out {
			if !r.appendTransition(ctx, k, events.NewRolloutTransition(events.TypeRolloutTargetRemoved, events.RolloutTransition{
				UID: ro.UID, Generation: ro.Generation, RevisionID: ro.RevisionID, Counts: s.rollouts[k].Counts(), Device: rm.Device, Error: rm.Reason})) {
				break // a conflict or an error: the next tick tries again
			}
		}
		r.decide(ctx, k)
	}
	// A removal is done once no rollout in progress has it as a target.
	for rm := range r.pending {
		done := true
		for k, ro := range s.rollouts {
			if k.ns == rm.Namespace && !ro.Terminal() && ro.IsTarget(rm.Device) && !ro.Follow {
				done = false
				break
			}
		}
		if done {
			delete(r.pending, rm)
		}
	}
}

// endSoaks decides again the rollouts whose running plan batch's soak time
// ended by now: no event marks the end of a soak.
func (r *runner) endSoaks(ctx context.Context, now time.Time) {
	for _, k := range r.s.sortedKeys() {
		if at := r.s.rollouts[k].SoakEnds(); !at.IsZero() && !now.Before(at) {
			r.decide(ctx, k)
		}
	}
}

// progressDeadlines judges every rollout's progress deadline at now: a
// Deployment whose rollout exceeded it, or no longer does, gets its status
// written again (no event marks a deadline passing) and its gauge set or
// deleted. It appends nothing and decides nothing.
func (r *runner) progressDeadlines(ctx context.Context, now time.Time) {
	s := r.s
	for _, k := range s.sortedKeys() {
		ro := s.rollouts[k]
		ex := !ro.Deleted && ro.DeadlineExceeded(now, r.ProgressDeadline)
		if ex == s.exceeded[k] {
			continue
		}
		s.dirtyStat[k] = true
		r.Metrics.progressDeadline(k, ex)
		if !ex {
			delete(s.exceeded, k)
			continue
		}
		s.exceeded[k] = true
		waiting, n := ro.Waiting(1)
		args := []any{"deployment", k.ns + "/" + k.name, "revision", ro.RevisionID, "deadline", ro.Deadline(r.ProgressDeadline),
			"lastProgress", ro.ProgressAt, "waiting", n}
		if len(waiting) > 0 {
			args = append(args, "device", waiting[0].Device, "phase", waiting[0].Result.Phase, "report", waiting[0].Result.Error)
		}
		r.Log.WarnContext(ctx, "rollout progress deadline exceeded: no transition, and no target's first report or first result, within the deadline", args...)
	}
	// Deployments no longer in the fold.
	for k := range s.exceeded {
		if _, ok := s.rollouts[k]; !ok {
			delete(s.exceeded, k)
			r.Metrics.progressDeadline(k, false)
		}
	}
}

// silentTargets are the targets of ro handed the revision at least timeout
// before now without a result (Converged or Failed) of it since; for a
// target that waits for the revision's maintenance window, at least
// timeout after the window opened (projections.Rollout.TargetTimeoutFrom).
func silentTargets(ro projections.Rollout, now time.Time, timeout time.Duration) []projections.RemovedTarget {
	first := ro.FirstHandedAt()
	if first.IsZero() || now.Sub(first) < timeout {
		return nil // nobody was handed it long enough ago
	}
	var out []projections.RemovedTarget
	for _, d := range ro.Released() {
		// A target that waits for the revision's maintenance window is
		// timed from the opening (ADR 0029).
		at := ro.TargetTimeoutFrom(d)
		if at.IsZero() || now.Sub(at) < timeout {
			continue
		}
		switch ro.Results[d].Phase {
		case events.WorkloadConverged, events.WorkloadFailed:
			continue
		}
		out = append(out, projections.RemovedTarget{Device: d,
			Reason: fmt.Sprintf("no result (Converged or Failed) within the target timeout (%s) of being handed the revision", timeout)})
	}
	return out
}

// appendTransition appends one transition of Deployment k with the
// expected last sequence of its rollout subject and folds it; false on a
// conflict (another runner appended first: its events come and the
// decision is taken again) or an error.
func (r *runner) appendTransition(ctx context.Context, k depKey, tr events.RolloutTransition) bool {
	s := r.s
	ro := s.rollouts[k]
	ev, err := events.New(events.Keys{Namespace: k.ns, Name: k.name}, tr, intent.Stamped(r.Stamp, events.WithCorrelation(ro.UID, ro.Generation))...)
	if err != nil {
		r.Log.ErrorContext(ctx, "build rollout transition", "deployment", k.ns+"/"+k.name, "error", err)
		return false
	}
	pos, err := r.Store.Append(ctx, ev, events.ExpectLastSubjectSequence(s.rolloutSeq[k]))
	if errors.Is(err, events.ErrConflict) {
		r.Log.DebugContext(ctx, "rollout transition conflict", "deployment", k.ns+"/"+k.name, "type", tr.EventType())
		return false
	}
	if err != nil {
		r.Log.ErrorContext(ctx, "append rollout transition", "deployment", k.ns+"/"+k.name, "type", tr.EventType(), "error", err)
		return false
	}
	s.appended(k, pos.Sequence, ev)
	r.Metrics.transition(k, string(tr.EventType()))
	r.Log.InfoContext(ctx, "rollout transition", "deployment", k.ns+"/"+k.name, "type", tr.EventType(),
		"revision", ro.RevisionID, "device", tr.Device, "reason", tr.Error)
	return true
}

// decide appends the state machine's next transitions for one Deployment
// and folds each one appended.
func (r *runner) decide(ctx context.Context, k depKey) {
	s := r.s
	ro := s.rollouts[k]
	for _, tr := range ro.NextAt(time.Now()) {
		ev, err := events.New(events.Keys{Namespace: k.ns, Name: k.name}, tr, intent.Stamped(r.Stamp, events.WithCorrelation(ro.UID, ro.Generation))...)
		if err != nil {
			r.Log.ErrorContext(ctx, "build rollout transition", "deployment", k.ns+"/"+k.name, "error", err)
			return
		}
		pos, err := r.Store.Append(ctx, ev, events.ExpectLastSubjectSequence(s.rolloutSeq[k]))
		if errors.Is(err, events.ErrConflict) {
			// Another runner decided first; its events are on their way
			// and the decision is re-taken when they are folded.
			r.Log.DebugContext(ctx, "rollout transition conflict", "deployment", k.ns+"/"+k.name, "type", tr.EventType())
			return
		}
		if err != nil {
			r.Log.ErrorContext(ctx, "append rollout transition; retried on the next tick", "deployment", k.ns+"/"+k.name, "type", tr.EventType(), "error", err)
			r.undecided[k] = true
			return
		}
		s.appended(k, pos.Sequence, ev)
		r.Metrics.transition(k, string(tr.EventType()))
		if at, ok := s.revisedAt[k]; ok {
			switch tr.EventType() {
			case events.TypeRolloutSucceeded:
				r.Metrics.rolloutEnded(k, "succeeded", time.Since(at))
			case events.TypeRolloutFailed:
				r.Metrics.rolloutEnded(k, "failed", time.Since(at))
			}
		}
		r.Log.InfoContext(ctx, "rollout transition", "deployment", k.ns+"/"+k.name, "type", tr.EventType(),
			"revision", ro.RevisionID, "succeeded", tr.Counts.Succeeded, "failed", tr.Counts.Failed, "total", tr.Counts.Total)
	}
	r.handUnhanded(ctx, k)
}

// reassemble reads a chunked revision's subject from its start, through a
// new events.RevisionAssembler, up to the revision (rec), and returns it
// whole.
func reassemble(ctx context.Context, reader intent.Reader, rec events.Record) (events.Event, error) {
	var a events.RevisionAssembler
	for got, err := range reader.Replay(ctx, rec.Subject, events.FromStart()) {
		if _, skip := events.AsRecordError(err); skip {
			continue
		}
		if err != nil {
			return events.Event{}, fmt.Errorf("read intent of %s: %w", rec.Subject, err)
		}
		if got.Sequence > rec.Sequence {
			break
		}
		whole, ok, err := a.Add(got.Event)
		if got.Sequence == rec.Sequence {
			if err == nil && !ok {
				err = fmt.Errorf("%w: record %d of %s is not a revision", events.ErrChunksMissing, rec.Sequence, rec.Subject)
			}
			return whole, err
		}
	}
	return events.Event{}, fmt.Errorf("%w: revision %d of %s was not read again", events.ErrChunksMissing, rec.Sequence, rec.Subject)
}

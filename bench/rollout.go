package bench

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/score"
)

// rolloutFigures are what one rollout measured.
type rolloutFigures struct {
	generation                      int64
	projected, converged, succeeded time.Duration
	// convergedAtSucceeded is how many targets had been seen reporting
	// Converged on their own subjects when rollout.succeeded arrived;
	// maxFailed is the largest failed count in the runner's transitions of
	// the revision.
	convergedAtSucceeded, maxFailed int
}

// rollout appends the next revision of the benchmark Deployment targeting
// devices 1..n, as the operator's Deployment controller appends it, and
// measures until the runner projected it, every device converged and the
// runner appended rollout.succeeded. With flood, the flooders start just
// before the append (the caller stops them).
//
// Everything it watches arrives on one channel, in the order the server
// sent it: a target's Converged report is always seen before a
// rollout.succeeded that counted it, so rollout.succeeded arriving before
// every target's own Converged report means the runner counted reports
// that were not theirs (ErrMiscounted). It watches each target's own
// workload subject, never the wildcard a flooder also publishes on.
func (b *bench) rollout(ctx context.Context, n int, res *Result, flood *floodRun) (rolloutFigures, error) {
	cp := b.cp
	b.generation++
	generation := b.generation
	fig := rolloutFigures{generation: generation}
	ev, revisionID, err := b.revision(n, generation)
	if err != nil {
		return fig, err
	}

	// A device that reports the revision Failed, a rollout.failed or a
	// control plane component that stops ends the wait at once.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	go func() {
		select {
		case <-cp.failed:
			fail(fmt.Errorf("%w: %w", ErrControlPlane, cp.failure()))
		case <-ctx.Done():
		}
	}()
	w := &rolloutWatch{ctx: ctx, fail: fail, log: b.o.Logger, uid: b.uid, generation: generation, n: n,
		projected: newCounter(n), converged: newCounter(n), succeeded: newCounter(1), skips: events.NewSkipCounter()}
	defer func() {
		res.Skipped += w.skips.Skipped(events.StreamReports, "") + w.skips.Skipped(events.StreamRollout, "")
	}()
	msgs := make(chan *nats.Msg, 4*n+1024)
	subs, err := b.subscribeRollout(n, msgs)
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	if err != nil {
		return fig, err
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	wg.Go(func() {
		for {
			select {
			case m := <-msgs:
				w.handle(m)
			case <-done:
				return
			}
		}
	})

	if flood != nil {
		if err := flood.start(ctx, floodTarget{Namespace: benchNamespace, Deployment: benchDeployment, UID: b.uid, Generation: generation,
			RevisionID: revisionID, Targets: n, WorkloadOnly: b.o.FloodWorkloadOnly}, b.o.Timeout); err != nil {
			return fig, err
		}
	}
	reconnects := cp.monitor.Stats().Reconnects
	began := time.Now()
	pos, err := cp.store.Append(ctx, ev, events.ExpectLastSubjectSequence(b.lastSeq))
	if err != nil {
		return fig, fmt.Errorf("scalebench: append the revision: %w", err)
	}
	b.lastSeq = pos.Sequence
	b.o.Logger.Info("revision appended", "generation", generation, "targets", n, "flood", flood != nil)
	for _, wt := range []struct {
		c    *counter
		what string
		into *time.Duration
	}{{w.projected, "fleet-intent values written by the runner", &fig.projected}, {w.converged, "devices reporting Converged", &fig.converged},
		{w.succeeded, "rollout.succeeded", &fig.succeeded}} {
		if err := await(ctx, wt.c, b.o.Timeout-time.Since(began), wt.what); err != nil {
			if r := cp.monitor.Stats().Reconnects - reconnects; r > 0 {
				return fig, fmt.Errorf("%w (%d times): %w", ErrMeasurementGap, r, err)
			}
			return fig, err
		}
		_, last := wt.c.state()
		*wt.into = last.Sub(began)
	}
	fig.convergedAtSucceeded, fig.maxFailed = int(w.atSucceeded.Load()), int(w.maxFailed.Load())
	if r := cp.monitor.Stats().Reconnects - reconnects; r > 0 {
		return fig, fmt.Errorf("%w (%d times): its counts may be short", ErrMeasurementGap, r)
	}
	return fig, fig.check(n, subs)
}

// check fails when the measurement's subscriptions dropped messages or
// the runner counted reports that were not the n targets' own.
func (fig rolloutFigures) check(n int, subs []*nats.Subscription) error {
	var lost int
	for _, s := range subs {
		if d, err := s.Dropped(); err == nil {
			lost += d
		}
	}
	switch {
	case lost > 0:
		return fmt.Errorf("scalebench: the measurement's subscriptions dropped %d messages (its channel was full)", lost)
	case fig.convergedAtSucceeded < n:
		return fmt.Errorf("%w: rollout.succeeded arrived when %d of %d targets had reported Converged on their own subjects",
			ErrMiscounted, fig.convergedAtSucceeded, n)
	case fig.maxFailed > 0:
		return fmt.Errorf("%w: a transition showed %d failed targets; none reported Failed on its own subject", ErrMiscounted, fig.maxFailed)
	}
	return nil
}

// revision is the benchmark Deployment's revision generation targeting
// devices 1..n, as the operator's Deployment controller appends it, and
// its revision ID.
func (b *bench) revision(n int, generation int64) (events.Event, string, error) {
	sc := score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: benchImage}}}}
	digest, raw, err := operator.ScoreDigest(sc)
	if err != nil {
		return events.Event{}, "", err
	}
	targets := make([]string, n)
	for i := range targets {
		targets[i] = DeviceName(i + 1)
	}
	slices.Sort(targets)
	rev := events.DeploymentRevisionCreated{UID: b.uid, Generation: generation, RevisionID: operator.RevisionID(generation, digest),
		ScoreDigest: digest, Score: raw, Targets: targets, Canaries: []string{}}
	ev, err := events.New(events.Keys{Namespace: benchNamespace, Name: benchDeployment}, rev, events.WithCorrelation(b.uid, generation))
	if err != nil {
		return events.Event{}, "", err
	}
	return ev, rev.RevisionID, nil
}

// rolloutSubject is the benchmark Deployment's rollout transitions' subject.
const rolloutSubject = "fleet.rollout.deployment." + benchNamespace + "." + benchDeployment

// subscribeRollout subscribes msgs to what a rollout's measurement
// watches: the fleet-intent values, the rollout transitions and each
// target's own workload subject. It returns the subscriptions made, also
// with an error: the caller unsubscribes them.
func (b *bench) subscribeRollout(n int, msgs chan *nats.Msg) ([]*nats.Subscription, error) {
	subjects := []string{"$KV." + events.BucketIntent + ".*", rolloutSubject}
	for i := 1; i <= n; i++ {
		subj, err := events.ReportSubject(DeviceName(i), events.ReportWorkload)
		if err != nil {
			return nil, fmt.Errorf("scalebench: %w", err)
		}
		subjects = append(subjects, subj)
	}
	var subs []*nats.Subscription
	for _, subj := range subjects {
		s, err := b.cp.monitor.ChanSubscribe(subj, msgs)
		if err != nil {
			return subs, fmt.Errorf("scalebench: %w", err)
		}
		subs = append(subs, s)
	}
	if err := b.cp.monitor.Flush(); err != nil {
		return subs, fmt.Errorf("scalebench: %w", err)
	}
	return subs, nil
}

// rolloutWatch counts what one rollout's measurement sees, in the order
// the server sent it (one goroutine calls handle).
type rolloutWatch struct {
	ctx        context.Context // the measurement's, for the skip log
	fail       context.CancelCauseFunc
	log        *slog.Logger
	uid        string
	generation int64
	n          int

	projected, converged, succeeded *counter
	skips                           *events.SkipCounter
	// atSucceeded is the converged count when rollout.succeeded arrived;
	// maxFailed the largest failed count in the revision's transitions.
	atSucceeded, maxFailed atomic.Int64
}

// ofThisRevision decodes a stored message for its subject (one that does
// not decode is skipped and counted: device input) and keeps it only when
// it belongs to the revision being measured.
func (w *rolloutWatch) ofThisRevision(m *nats.Msg) (events.Event, bool) {
	ev, err := events.DecodeStored(m.Subject, m.Data)
	if re, ok := events.AsRecordError(err); ok {
		w.skips.Skip(w.ctx, w.log, re)
		return events.Event{}, false
	}
	if err != nil || ev.Correlation == nil || ev.Correlation.DeploymentUID != w.uid || ev.Correlation.Generation != w.generation {
		return events.Event{}, false
	}
	return ev, true
}

// handle counts one message the measurement's subscriptions received.
func (w *rolloutWatch) handle(m *nats.Msg) {
	switch {
	case strings.HasPrefix(m.Subject, "$KV."):
		if dev := token(m.Subject, 2); deviceIndex(dev) <= w.n {
			w.projected.see(dev)
		}
	case m.Subject == rolloutSubject:
		w.transition(m)
	default:
		w.workload(m)
	}
}

// transition counts a rollout transition of the revision.
func (w *rolloutWatch) transition(m *nats.Msg) {
	ev, ok := w.ofThisRevision(m)
	if !ok {
		return
	}
	tr, err := events.Decode[events.RolloutTransition](ev)
	if err != nil {
		return
	}
	if f := int64(tr.Counts.Failed); f > w.maxFailed.Load() {
		w.maxFailed.Store(f)
	}
	switch ev.Type {
	case events.TypeRolloutSucceeded:
		got, _ := w.converged.state()
		w.atSucceeded.Store(int64(got))
		w.succeeded.see("succeeded")
	case events.TypeRolloutFailed:
		// A target's own Failed report would have been seen first
		// and ended the wait.
		w.fail(fmt.Errorf("%w: the runner failed the revision (device %q, %d failed) though no target reported Failed on its own subject",
			ErrMiscounted, tr.Device, tr.Counts.Failed))
	}
}

// workload counts a target's workload report. Reports are device input:
// one that does not decode for its subject is skipped and counted; the
// device is the subject's.
func (w *rolloutWatch) workload(m *nats.Msg) {
	ev, ok := w.ofThisRevision(m)
	if !ok {
		return
	}
	ws, err := events.Decode[events.WorkloadStatus](ev)
	switch {
	case err != nil:
	case ws.Phase == events.WorkloadConverged:
		w.converged.see(ev.Keys.Device)
	case ws.Phase == events.WorkloadFailed:
		w.fail(fmt.Errorf("%w: device %s failed the revision: %s", ErrIncomplete, ev.Keys.Device, ws.Error))
	}
}

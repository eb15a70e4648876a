package runner

import (
	"context"
	"iter"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Reader reads the records of one stream's subject filters through one
// consumer. *events.Store implements it.
type Reader interface {
	ReplaySubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error]
	FollowSubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error]
}

// Source is one read of a Runner: subject filters of one stream, read by
// one consumer, and where the read starts.
type Source struct {
	// Filters are the subject filters, all of one stream.
	Filters []string
	// After is the stream sequence the read starts after (a checkpoint's
	// position); zero: From.
	After uint64
	// From is where the read starts when After is zero; the zero Start:
	// the stream's first record.
	From events.Start
	// FollowOnly skips the catch-up: the source is caught up at its start
	// and follows from there (the dashboard's change feed).
	FollowOnly bool
	// Until, when set, ends the read before the first record stored after
	// it (a question about the past: fleet history at a time): the source
	// is caught up there and does not follow.
	Until time.Time
	// AfterPrevious holds the read back until the source before it in
	// Runner.Sources caught up with its history (the TaskRun runner reads
	// the task reports only once it knows every TaskRun stored before).
	AfterPrevious bool
}

// Msg is what a Runner hands over: a record, a skip, a catch-up mark or,
// from RunOnce only, a failed read.
type Msg struct {
	// Source is the index in Runner.Sources of the source it comes from.
	Source int
	// Record is the record read, when Skip, Caught and Err are unset.
	Record events.Record
	// Skip is set for a record that does not decode: count it and move
	// past it (the Runner already did).
	Skip *events.RecordError
	// Caught marks that Source caught up with its history: every record
	// stored before the read began was handed over before it.
	Caught bool
	// Live is set on the catch-up mark that completes every source's
	// catch-up: the reader goes live on it.
	Live bool
	// Err is a read that failed, from RunOnce only: Run and RunToEnd read
	// again instead.
	Err error
}

// Seq is the stream sequence of the record or skip m carries.
func (m Msg) Seq() uint64 {
	if m.Skip != nil {
		return m.Skip.Sequence
	}
	return m.Record.Sequence
}

// Defaults of the wait before a failed read is read again.
const (
	DefaultRetryMin = 250 * time.Millisecond
	DefaultRetryMax = 10 * time.Second
)

// Runner reads its Sources concurrently and hands every record, skip and
// catch-up mark to one channel. Configure it, then call one of Run,
// RunToEnd or RunOnce; a Runner holds no state between calls but its
// counters.
type Runner struct {
	// Name says whose reads these are in log lines ("rollout runner").
	Name string
	// Reader reads the streams. Required.
	Reader Reader
	// Log: default discard.
	Log *slog.Logger
	// Sources are the reads, each by one consumer.
	Sources []Source
	// RetryMin and RetryMax bound the wait before a failed read is read
	// again: it doubles from the first to the second. Zero: DefaultRetryMin,
	// DefaultRetryMax.
	RetryMin, RetryMax time.Duration

	records, skips, failed atomic.Uint64
}

// Records returns how many decoded records the Runner handed over.
func (r *Runner) Records() uint64 { return r.records.Load() }

// Skipped returns how many undecodable records the Runner handed over as
// skips.
func (r *Runner) Skipped() uint64 { return r.skips.Load() }

// ReadsFailed returns how many reads failed (and were read again, but in
// RunOnce).
func (r *Runner) ReadsFailed() uint64 { return r.failed.Load() }

// Run catches up with every source, then follows each live, handing
// everything to out, until ctx ends; it returns once its reads stopped. A
// failed read is read again from after the source's last record.
func (r *Runner) Run(ctx context.Context, out chan<- Msg) {
	r.run(ctx, out, mode{follow: true, retry: true})
}

// RunToEnd catches up with every source, reading again after a failed
// read, and returns once every source is caught up (its Live mark handed
// over) or ctx ended.
func (r *Runner) RunToEnd(ctx context.Context, out chan<- Msg) { r.run(ctx, out, mode{retry: true}) }

// RunOnce reads every source's history once: a failed read is handed over
// as Msg.Err and ends that source's read (no catch-up mark follows it). It
// returns once every read ended.
func (r *Runner) RunOnce(ctx context.Context, out chan<- Msg) { r.run(ctx, out, mode{}) }

// mode is what a run does after the catch-up and after a failed read.
type mode struct{ follow, retry bool }

func (r *Runner) run(ctx context.Context, out chan<- Msg, m mode) {
	log := r.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// caught[i] closes when source i caught up, ended[i] when its read
	// ended (in RunOnce, perhaps without catching up).
	caught := make([]chan struct{}, len(r.Sources))
	ended := make([]chan struct{}, len(r.Sources))
	for i := range caught {
		caught[i], ended[i] = make(chan struct{}), make(chan struct{})
	}
	var live atomic.Int64
	var wg sync.WaitGroup
	for i, src := range r.Sources {
		wg.Go(func() {
			defer close(ended[i])
			if src.AfterPrevious && i > 0 && !waitCaught(ctx, caught[i-1], ended[i-1]) {
				return
			}
			rd := &read{r: r, log: log, ctx: ctx, out: out, index: i, src: src, mode: m, last: src.After}
			rd.run(func() bool { return live.Add(1) == int64(len(r.Sources)) }, func() { close(caught[i]) })
		})
	}
	wg.Wait()
}

// waitCaught waits for a source to catch up: false when its read ended
// without catching up, or ctx ended first.
func waitCaught(ctx context.Context, caught, ended <-chan struct{}) bool {
	select {
	case <-caught:
		return true
	case <-ended:
		select {
		case <-caught:
			return true
		default:
			return false
		}
	case <-ctx.Done():
		return false
	}
}

package runner

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// read is one source's read within one run.
type read struct {
	r     *Runner
	log   *slog.Logger
	ctx   context.Context
	out   chan<- Msg
	index int
	src   Source
	mode  mode
	// last is the stream sequence of the last record or skip handed over.
	last uint64
	wait time.Duration
}

// run replays the source's history, hands over its catch-up mark (live
// says whether it completes every source's), then calls caught (a source
// held behind this one starts reading) and follows when the mode says so.
// It returns when ctx ends, or when a read ends for good.
func (rd *read) run(live func() bool, caught func()) {
	if !rd.src.FollowOnly && !rd.loop(rd.r.Reader.ReplaySubjects, false) {
		return
	}
	sent := rd.send(Msg{Source: rd.index, Caught: true, Live: live()})
	caught()
	if !sent || !rd.mode.follow || !rd.src.Until.IsZero() {
		return
	}
	rd.loop(rd.r.Reader.FollowSubjects, true)
}

// errFollowEnded is a follow that ended while the run goes on.
var errFollowEnded = errors.New("the follow ended before the run")

// loop reads with open until a read ends without an error (true), ctx
// ends or, in RunOnce, a read fails (false). A failed read is read again
// from after the last record handed over, after a wait that doubles from
// RetryMin to RetryMax; so is a follow that ends while ctx goes on.
func (rd *read) loop(open func(context.Context, []string, events.Start) iter.Seq2[events.Record, error], follow bool) bool {
	for {
		stop, err := rd.each(open(rd.ctx, rd.src.Filters, rd.start()))
		if !stop && err == nil && follow {
			err = errFollowEnded
		}
		if err != nil {
			rd.r.failed.Add(1)
		}
		switch {
		case stop:
			return false
		case err == nil:
			return true
		case !rd.mode.retry:
			rd.send(Msg{Source: rd.index, Err: err})
			return false
		case !rd.again(err):
			return false
		}
	}
}

// start is where the next read begins: past the last record handed over,
// or the source's own start.
func (rd *read) start() events.Start {
	if rd.last == 0 && rd.src.From != (events.Start{}) {
		return rd.src.From
	}
	return events.FromSequence(rd.last + 1)
}

// each hands over the records of one read past last; stop is set when ctx
// ended, err when the read failed.
func (rd *read) each(records iter.Seq2[events.Record, error]) (stop bool, err error) {
	for rec, err := range records {
		m := Msg{Source: rd.index, Record: rec}
		if !rd.src.Until.IsZero() && rec.Stored.After(rd.src.Until) {
			return false, nil // the first record after Until: the read ends here
		}
		if err != nil {
			re, ok := events.AsRecordError(err)
			if !ok {
				if rd.ctx.Err() != nil {
					return true, nil
				}
				return false, err
			}
			m.Skip = re
		}
		if m.Seq() <= rd.last {
			continue // read again after a failed read
		}
		rd.last = m.Seq()
		if m.Skip != nil {
			rd.r.skips.Add(1)
		} else {
			rd.r.records.Add(1)
		}
		if !rd.send(m) {
			return true, nil
		}
	}
	return rd.ctx.Err() != nil, nil
}

// again logs a failed read and waits before it is read again; false when
// ctx ended first.
func (rd *read) again(err error) bool {
	lo, hi := rd.r.RetryMin, rd.r.RetryMax
	if lo <= 0 {
		lo = DefaultRetryMin
	}
	if hi <= 0 {
		hi = DefaultRetryMax
	}
	if rd.wait == 0 {
		rd.wait = lo
	}
	rd.log.WarnContext(rd.ctx, rd.r.Name+": reading the stream failed; reading again after the last record folded",
		"filter", strings.Join(rd.src.Filters, ","), "after", rd.last, "retryIn", rd.wait, "error", err)
	t := time.NewTimer(rd.wait)
	defer t.Stop()
	select {
	case <-rd.ctx.Done():
		return false
	case <-t.C:
	}
	rd.wait = min(2*rd.wait, hi)
	return true
}

// send hands m over; false when ctx ended first.
func (rd *read) send(m Msg) bool {
	select {
	case rd.out <- m:
		return true
	case <-rd.ctx.Done():
		return false
	}
}

package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// LedgerOptions configure a Ledger.
type LedgerOptions struct {
	// Stream is the stream the ledger appends to; Subject one of its
	// subjects. Required. The stream must have a duplicate window longer
	// than the longest outage a run causes: an append that timed out is
	// retried with its message id, and the window is what makes the retry
	// store it once.
	Stream, Subject string
	// Interval is the least time between two appends. Default 20ms.
	Interval time.Duration
	// Timeout bounds one append (a stream without a leader answers
	// nothing). Default 2s.
	Timeout time.Duration
}

// Ledger appends numbered messages to a stream, one after the other, and
// records each one JetStream acknowledged (its message id and sequence):
// after a run, Check reads the stream back and accounts for every
// acknowledged append. It stands for the event store's writers (every
// Fleet decision is one acknowledged append with a message id).
type Ledger struct {
	js jetstream.JetStream
	o  LedgerOptions

	mu       sync.Mutex // guards the fields below
	acked    map[string]uint64
	ackTimes []time.Time // when each acknowledgement came, in order
	failures int         // appends that were not acknowledged (then retried)
	lastAck  time.Time   // when the last acknowledgement came
	maxGap   time.Duration
}

// NewLedger returns a ledger appending with js.
func NewLedger(js jetstream.JetStream, o LedgerOptions) (*Ledger, error) {
	if o.Stream == "" || o.Subject == "" {
		return nil, errors.New("chaos: LedgerOptions: Stream and Subject are required")
	}
	if o.Interval == 0 {
		o.Interval = 20 * time.Millisecond
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Second
	}
	return &Ledger{js: js, o: o, acked: map[string]uint64{}}, nil
}

// Run appends until ctx ends. An append that is not acknowledged is
// retried with the same message id until it is (or ctx ends); it returns
// nil when ctx ends.
func (l *Ledger) Run(ctx context.Context) error {
	tick := time.NewTicker(l.o.Interval)
	defer tick.Stop()
	for n := 1; ; n++ {
		id := "ledger-" + strconv.Itoa(n)
		for {
			actx, cancel := context.WithTimeout(ctx, l.o.Timeout)
			ack, err := l.js.Publish(actx, l.o.Subject, []byte(id), jetstream.WithMsgID(id))
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			if err == nil && ack.Stream == l.o.Stream {
				l.record(id, ack.Sequence)
				break
			}
			l.mu.Lock()
			l.failures++
			l.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (l *Ledger) record(id string, seq uint64) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.acked[id] = seq
	l.ackTimes = append(l.ackTimes, now)
	if !l.lastAck.IsZero() && now.Sub(l.lastAck) > l.maxGap {
		l.maxGap = now.Sub(l.lastAck)
	}
	l.lastAck = now
}

// Acked is the number of acknowledged appends so far.
func (l *Ledger) Acked() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// LastAck is when the last acknowledgement came (zero: none yet).
func (l *Ledger) LastAck() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastAck
}

// FirstAckAfter is when the first acknowledgement after t came, and
// whether one has.
func (l *Ledger) FirstAckAfter(t time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i, _ := slices.BinarySearchFunc(l.ackTimes, t, func(a, b time.Time) int { return a.Compare(b) })
	if i == len(l.ackTimes) {
		return time.Time{}, false
	}
	return l.ackTimes[i], true
}

// MaxGap is the longest time between two acknowledgements so far.
func (l *Ledger) MaxGap() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.maxGap
}

// LedgerFigures are what Check found.
type LedgerFigures struct {
	// Acked counts the acknowledged appends; Failures the appends that were
	// not acknowledged in time (each retried with its id).
	Acked, Failures int
	// Stored counts the messages in the stream; Lost the acknowledged ids
	// not in it; Duplicates the ids stored more than once; Moved the
	// acknowledged ids stored at another sequence than their ack said.
	Stored, Lost, Duplicates, Moved int
	// MaxGap is the longest time between two acknowledgements: how long
	// the stream could not be written to.
	MaxGap time.Duration
}

// String is the figures on one line.
func (f LedgerFigures) String() string {
	return fmt.Sprintf("acked %d, unacknowledged attempts %d, stored %d, lost %d, duplicates %d, moved %d, longest time without an ack %s",
		f.Acked, f.Failures, f.Stored, f.Lost, f.Duplicates, f.Moved, f.MaxGap.Round(time.Millisecond))
}

// ErrLost reports acknowledged appends the stream does not hold once, at
// their sequence.
var ErrLost = errors.New("chaos: acknowledged appends lost, duplicated or moved")

// Check reads the whole stream back (stop Run first) and accounts for
// every acknowledged append: present once, at the sequence its ack gave.
// It returns the figures, and an error wrapping ErrLost naming the first
// ids that are not.
func (l *Ledger) Check(ctx context.Context) (LedgerFigures, error) {
	l.mu.Lock()
	acked := make(map[string]uint64, len(l.acked))
	for k, v := range l.acked {
		acked[k] = v
	}
	f := LedgerFigures{Acked: len(acked), Failures: l.failures, MaxGap: l.maxGap}
	l.mu.Unlock()

	s, err := l.js.Stream(ctx, l.o.Stream)
	if err != nil {
		return f, fmt.Errorf("chaos: ledger stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return f, fmt.Errorf("chaos: ledger stream: %w", err)
	}
	stored := map[string][]uint64{}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return f, fmt.Errorf("chaos: read the ledger at %d: %w", seq, err)
		}
		stored[string(m.Data)] = append(stored[string(m.Data)], seq)
		f.Stored++
	}
	var bad []string
	for id, seq := range acked {
		got := stored[id]
		switch {
		case len(got) == 0:
			f.Lost++
			bad = append(bad, id+" lost")
		case len(got) > 1:
			f.Duplicates++
			bad = append(bad, fmt.Sprintf("%s stored %d times", id, len(got)))
		case got[0] != seq:
			f.Moved++
			bad = append(bad, fmt.Sprintf("%s at %d, acked at %d", id, got[0], seq))
		}
	}
	for id, got := range stored { // unacknowledged attempts stored twice
		if _, ok := acked[id]; !ok && len(got) > 1 {
			f.Duplicates++
			bad = append(bad, fmt.Sprintf("%s (never acked) stored %d times", id, len(got)))
		}
	}
	if len(bad) > 0 {
		slices.Sort(bad)
		return f, fmt.Errorf("%w: %d of %d: %v", ErrLost, len(bad), len(acked), bad[:min(len(bad), 10)])
	}
	return f, nil
}

package events

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/oklog/ulid/v2"
)

// Header names set on every appended event, besides Nats-Msg-Id (the ULID).
// They let the nats CLI and other tools filter without decoding payloads.
const (
	HeaderType    = "Fleet-Event-Type"
	HeaderVersion = "Fleet-Event-Version"
)

// StoreOptions configure a Store.
type StoreOptions struct {
	// Logger receives debug records of appends and reads, and a warning for
	// every record LastPerSubject leaves out because it does not decode.
	// Default: discard.
	Logger *slog.Logger
	// Skips counts the records LastPerSubject leaves out (Replay, Follow
	// and Last hand them to the caller, who counts). Nil: not counted.
	Skips *SkipCounter
	// MaxPendingAsync bounds the async appends in flight on the connection.
	// Default 4000.
	MaxPendingAsync int
	// StallWait is how long an async append waits for room when
	// MaxPendingAsync appends are in flight. Default 5s (the client default
	// of 200 ms fails batches under load).
	StallWait time.Duration
}

// Store appends and reads Fleet events on JetStream. It is safe for
// concurrent use. It owns no goroutines; closing the connection is the
// caller's.
type Store struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	log       *slog.Logger
	skips     *SkipCounter
	stallWait time.Duration
}

// NewStore returns a Store on a connected client.
func NewStore(nc *nats.Conn, o StoreOptions) (*Store, error) {
	if nc == nil {
		return nil, errors.New("events store: nil NATS connection")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MaxPendingAsync == 0 {
		o.MaxPendingAsync = 4000
	}
	if o.StallWait == 0 {
		o.StallWait = 5 * time.Second
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(o.MaxPendingAsync))
	if err != nil {
		return nil, fmt.Errorf("events store: %w", err)
	}
	return &Store{nc: nc, js: js, log: o.Logger, skips: o.Skips, stallWait: o.StallWait}, nil
}

// JetStream returns the JetStream handle the store uses.
func (s *Store) JetStream() jetstream.JetStream { return s.js }

// Position is where an appended event is stored.
type Position struct {
	Stream   string
	Sequence uint64
	// Duplicate is true when the event's id was already stored within the
	// duplicate window: nothing new was written and Sequence is the original.
	Duplicate bool
}

// AppendOption adjusts one append.
type AppendOption func(*appendOpts)

type appendOpts struct {
	expect    bool
	expectSeq uint64
}

// ExpectLastSubjectSequence makes the append conditional: it is stored only
// if the last message on the event's subject has sequence seq (0: the subject
// has no message yet). Otherwise it fails with a *ConflictError and nothing
// is written.
func ExpectLastSubjectSequence(seq uint64) AppendOption {
	return func(o *appendOpts) { o.expect, o.expectSeq = true, seq }
}

// Message validates an event and builds its NATS message: the JSON envelope
// as payload, the event's ULID as Nats-Msg-Id (duplicates within the
// stream's window are stored once) and its type and version as headers.
// The agent publishes its reports with it (a core publish: the report
// streams do not acknowledge).
func Message(ev Event) (*nats.Msg, error) {
	subj, err := ev.validate(false)
	if err != nil {
		return nil, err
	}
	payload, err := ev.Marshal()
	if err != nil {
		return nil, fmt.Errorf("encode event %s: %w", ev.ID, err)
	}
	m := nats.NewMsg(subj)
	m.Data = payload
	m.Header[jetstream.MsgIDHeader] = []string{ev.ID.String()}
	m.Header[HeaderType] = []string{string(ev.Type)}
	m.Header[HeaderVersion] = []string{strconv.Itoa(ev.Version)}
	return m, nil
}

// controlPlaneMessage is Message for the control plane's appends: a subject
// only devices write is refused (ErrDeviceWritten), since its stream would
// never acknowledge.
func controlPlaneMessage(ev Event) (*nats.Msg, error) {
	m, err := Message(ev)
	if err != nil {
		return nil, err
	}
	if deviceWritten(m.Subject) {
		return nil, fmt.Errorf("append to %s: %w: devices publish reports without an acknowledgement; a stand-in device uses Store.Report",
			m.Subject, ErrDeviceWritten)
	}
	return m, nil
}

// deviceWritten reports whether subject belongs to a stream only devices
// write.
func deviceWritten(subject string) bool {
	stream, err := StreamOf(subject)
	return err == nil && (stream == StreamReports || stream == StreamTelemetry || stream == StreamLiveness)
}

// Report publishes device reports as devices do (core publishes, never
// acknowledged) and waits until they are stored. It is for whatever stands
// in for a device on the control plane's connection (tests, simulators);
// the connection must be allowed to publish on the subjects. Every event is
// validated first: one that is invalid or not a report publishes nothing.
//
// One connection's messages reach a stream in the order they were sent, so
// Report waits until the last report it sent to each stream is that
// subject's last record; the earlier ones were taken or refused by then (a
// device learns of neither either). A later report on the same subject from
// someone else can hide that record: stand-ins report one at a time per
// subject. A report the stream drops (a duplicate id of an older record, a
// full ingest queue) is waited for until ctx ends, at most 30 s when ctx
// has no deadline.
func (s *Store) Report(ctx context.Context, evs ...Event) error {
	if _, ok := ctx.Deadline(); !ok {
		// A report the stream drops is never answered: bound the wait.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, reportTimeout)
		defer cancel()
	}
	msgs := make([]*nats.Msg, len(evs))
	for i, ev := range evs {
		m, err := Message(ev)
		if err != nil {
			return fmt.Errorf("report %d: %w (nothing published)", i, err)
		}
		if !deviceWritten(m.Subject) {
			return fmt.Errorf("report %d on %s: not a report subject (fleet.report.<device>.<kind>); nothing published", i, m.Subject)
		}
		msgs[i] = m
	}
	lastOf := map[string]int{} // stream → index of its last report
	for i, m := range msgs {
		if err := s.nc.PublishMsg(m); err != nil {
			return fmt.Errorf("report %d on %s: %w", i, m.Subject, err)
		}
		stream, _ := StreamOf(m.Subject)
		lastOf[stream] = i
	}
	if err := s.nc.FlushWithContext(ctx); err != nil {
		return fmt.Errorf("reports: flush: %w", err)
	}
	for _, i := range lastOf {
		if err := s.awaitStored(ctx, msgs[i].Subject, evs[i].ID); err != nil {
			return err
		}
	}
	return nil
}

// reportTimeout bounds Report when its context has no deadline.
const reportTimeout = 30 * time.Second

// awaitStored polls the last record of subject until it is the event id.
func (s *Store) awaitStored(ctx context.Context, subject string, id ulid.ULID) error {
	wait := time.Millisecond
	for {
		rec, err := s.Last(ctx, subject)
		switch {
		case err == nil && rec.Event.ID == id:
			return nil
		case err != nil && !errors.Is(err, ErrNotFound) && ctx.Err() == nil:
			if _, isRec := AsRecordError(err); !isRec {
				return fmt.Errorf("report on %s: confirm it was stored: %w", subject, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("report on %s: not stored before the context ended (reports are never acknowledged): %w", subject, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

func publishOpts(o appendOpts) []jetstream.PublishOpt {
	if !o.expect {
		return nil
	}
	return []jetstream.PublishOpt{jetstream.WithExpectLastSequencePerSubject(o.expectSeq)}
}

// appendError types the server's answer: a stale expectation becomes a
// *ConflictError.
func appendError(subject string, o appendOpts, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
		return &ConflictError{Subject: subject, Expected: o.expectSeq, Server: apiErr.Description}
	}
	return fmt.Errorf("append to %s: %w", subject, err)
}

// Append stores one event and waits for the stream's acknowledgement. The
// event's ULID is its Nats-Msg-Id: appending the same event twice within the
// duplicate window stores it once (Position.Duplicate on the second). With
// ExpectLastSubjectSequence, a stale expectation returns a *ConflictError
// (errors.Is ErrConflict) and writes nothing.
func (s *Store) Append(ctx context.Context, ev Event, opts ...AppendOption) (Position, error) {
	var o appendOpts
	for _, f := range opts {
		f(&o)
	}
	m, err := controlPlaneMessage(ev)
	if err != nil {
		return Position{}, err
	}
	ack, err := s.js.PublishMsg(ctx, m, publishOpts(o)...)
	if err != nil {
		return Position{}, appendError(m.Subject, o, err)
	}
	s.log.DebugContext(ctx, "event appended", "type", ev.Type, "id", ev.ID.String(), "subject", m.Subject,
		"stream", ack.Stream, "seq", ack.Sequence, "duplicate", ack.Duplicate)
	return Position{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}, nil
}

// Batch collects events for AppendBatch. The zero value is ready to use.
type Batch struct {
	items []batchItem
}

type batchItem struct {
	ev   Event
	opts appendOpts
}

// Add queues an event with its own append options.
func (b *Batch) Add(ev Event, opts ...AppendOption) {
	var o appendOpts
	for _, f := range opts {
		f(&o)
	}
	b.items = append(b.items, batchItem{ev: ev, opts: o})
}

// Len is the number of queued events.
func (b *Batch) Len() int { return len(b.items) }

// Result is the outcome of one event of a batch.
type Result struct {
	Position Position
	// Err is nil when the event is stored (or was a duplicate).
	Err error
}

// AppendBatch publishes every event of the batch asynchronously, in order,
// and waits until each is acknowledged or failed. A batch is not atomic:
// every event succeeds or fails on its own (a stale expectation fails that
// event only, with a *ConflictError). The returned error joins the failures,
// each naming its index; results has one entry per event either way. An
// invalid event fails the whole batch before anything is published.
func (s *Store) AppendBatch(ctx context.Context, b *Batch) ([]Result, error) {
	msgs := make([]*nats.Msg, len(b.items))
	for i, it := range b.items {
		m, err := controlPlaneMessage(it.ev)
		if err != nil {
			return nil, fmt.Errorf("batch event %d: %w (nothing published)", i, err)
		}
		msgs[i] = m
	}
	results := make([]Result, len(msgs))
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		opts := append(publishOpts(b.items[i].opts), jetstream.WithStallWait(s.stallWait))
		f, err := s.js.PublishMsgAsync(m, opts...)
		if err != nil {
			results[i].Err = appendError(m.Subject, b.items[i].opts, err)
			continue
		}
		futures[i] = f
	}
	var errs []error
	for i, f := range futures {
		if f == nil {
			errs = append(errs, fmt.Errorf("batch event %d: %w", i, results[i].Err))
			continue
		}
		select {
		case ack := <-f.Ok():
			results[i].Position = Position{Stream: ack.Stream, Sequence: ack.Sequence, Duplicate: ack.Duplicate}
		case err := <-f.Err():
			results[i].Err = appendError(msgs[i].Subject, b.items[i].opts, err)
			errs = append(errs, fmt.Errorf("batch event %d: %w", i, results[i].Err))
		case <-ctx.Done():
			// Acks still in flight are unknown: the events may or may not be
			// stored. Retrying the same events is safe (dedup by id).
			for j := i; j < len(futures); j++ {
				if futures[j] != nil && results[j].Err == nil {
					results[j].Err = fmt.Errorf("append to %s: outcome unknown, retry the same event: %w", msgs[j].Subject, ctx.Err())
				}
			}
			errs = append(errs, fmt.Errorf("batch from event %d: %w", i, ctx.Err()))
			return results, errors.Join(errs...)
		}
	}
	s.log.DebugContext(ctx, "event batch appended", "events", len(msgs), "failed", len(errs))
	return results, errors.Join(errs...)
}

// Events returns the queued events in order.
func (b *Batch) Events() []Event {
	out := make([]Event, len(b.items))
	for i, it := range b.items {
		out[i] = it.ev
	}
	return out
}

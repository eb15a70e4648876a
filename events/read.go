package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Record is an event as stored: the envelope plus where and when the stream
// stored it.
type Record struct {
	Event    Event
	Subject  string
	Stream   string
	Sequence uint64
	// Stored is the stream's timestamp of the message.
	Stored time.Time
}

// Start says where a replay begins.
type Start struct {
	seq            uint64
	time           time.Time
	lastPerSubject bool
}

// FromStart replays from the first stored event.
func FromStart() Start { return Start{} }

// FromSequence replays from stream sequence seq (inclusive).
func FromSequence(seq uint64) Start { return Start{seq: seq} }

// FromTime replays from the first event stored at or after t.
func FromTime(t time.Time) Start { return Start{time: t} }

// FromLastPerSubject starts with the last stored event of every subject the
// filters match, in stream order, then goes on with every event stored
// after: with Follow, the current state and then every change.
func FromLastPerSubject() Start { return Start{lastPerSubject: true} }

func (s Start) apply(cfg *jetstream.OrderedConsumerConfig) {
	switch {
	case s.lastPerSubject:
		cfg.DeliverPolicy = jetstream.DeliverLastPerSubjectPolicy
	case s.seq > 0:
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = s.seq
	case !s.time.IsZero():
		t := s.time
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		cfg.OptStartTime = &t
	default:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
}

// Replay yields, in stream order, every event on subjects matching filter
// from the given start, and ends once it has caught up with the stream as it
// was when the replay began (its last sequence then). It reads with an
// ephemeral consumer (no acks) it pulls from itself in large batches,
// checking that every delivery is the consumer's next and comes later in
// the stream (a read that sees otherwise fails). The filter must select
// one stream (see StreamOf).
//
// Every stored message is decoded with DecodeStored. One that does not
// decode is yielded as a *RecordError (errors.Is ErrUndecodable) with a
// Record that carries only where it is stored (Subject, Stream, Sequence,
// Stored; a zero Event); the replay then goes on with the next message if
// the caller keeps iterating: skip it, count it and move past it. Any other
// error (the server, the connection, ctx) ends the replay.
func (s *Store) Replay(ctx context.Context, filter string, from Start) iter.Seq2[Record, error] {
	return s.read(ctx, []string{filter}, from, false)
}

// Follow is Replay that does not stop at the end: it yields events as they
// are stored, until ctx ends (then it ends without an error). Undecodable
// records are yielded as *RecordError and the follow goes on, as in Replay.
func (s *Store) Follow(ctx context.Context, filter string, from Start) iter.Seq2[Record, error] {
	return s.read(ctx, []string{filter}, from, true)
}

// ReplaySubjects is Replay of several subject filters of one stream (an
// error otherwise), in stream order, until caught up: the rollout runner
// reads a device's workload and health reports in the order they were
// stored. Each filter is read by its own consumer, merged by stream
// sequence (replayMerged).
func (s *Store) ReplaySubjects(ctx context.Context, filters []string, from Start) iter.Seq2[Record, error] {
	return s.read(ctx, filters, from, false)
}

// FollowSubjects is Follow of several subject filters of one stream (an
// error otherwise), read in stream order by one ordered consumer: one
// consumer, not one per filter, whatever the number of subjects they match.
func (s *Store) FollowSubjects(ctx context.Context, filters []string, from Start) iter.Seq2[Record, error] {
	return s.read(ctx, filters, from, true)
}

// ReplayBatchSize is how many messages a replay asks the server for at once.
const ReplayBatchSize = 4096

func (s *Store) read(ctx context.Context, filters []string, from Start, live bool) iter.Seq2[Record, error] {
	stream, err := streamOfAll(filters)
	if err != nil {
		return func(yield func(Record, error) bool) { yield(Record{}, err) }
	}
	switch {
	case live || from.lastPerSubject:
		return s.consume(ctx, stream, filters, from, live)
	case len(filters) > 1:
		return s.replayMerged(ctx, stream, filters, from)
	default:
		return s.pullReplay(ctx, stream, filters[0], from, 0)
	}
}

// consume reads filters of stream with one ordered consumer from the
// given start: a follow, or a replay from the last of each subject (live
// false), which ends once it has caught up.
func (s *Store) consume(ctx context.Context, stream string, filters []string, from Start, live bool) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		filter := strings.Join(filters, ",") // for errors
		cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters, InactiveThreshold: consumerInactiveThreshold, MaxResetAttempts: maxResetAttempts}
		from.apply(&cfg)
		cons, err := s.js.OrderedConsumer(ctx, stream, cfg)
		if err != nil {
			yield(Record{}, fmt.Errorf("replay %s: %w", filter, err))
			return
		}
		msgs, err := cons.Messages(jetstream.PullMaxMessages(ReplayBatchSize))
		if err != nil {
			yield(Record{}, fmt.Errorf("replay %s: %w", filter, err))
			return
		}
		defer s.stopOrdered(stream, cons, msgs)
		if !live {
			if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
				return
			}
		}
		for {
			m, err := msgs.Next(jetstream.NextContext(ctx))
			if err != nil {
				if ctx.Err() != nil && live {
					return
				}
				yield(Record{}, fmt.Errorf("replay %s: %w", filter, err))
				return
			}
			md, err := m.Metadata()
			if err != nil {
				yield(Record{}, fmt.Errorf("replay %s: %w", filter, err))
				return
			}
			rec := Record{Subject: m.Subject(), Stream: md.Stream, Sequence: md.Sequence.Stream, Stored: md.Timestamp}
			ev, err := DecodeStored(rec.Subject, m.Data())
			if err != nil {
				// One record: the caller skips it and may go on.
				if !yield(rec, located(err, rec)) {
					return
				}
			} else {
				rec.Event = ev
				if !yield(rec, nil) {
					return
				}
			}
			if !live && md.NumPending == 0 {
				return
			}
		}
	}
}

// replayMerged is the replay of several filters of one stream: one puller
// per filter, each up to the stream's last sequence when the
// replay began, merged by stream sequence, so the records come in stream
// order as one consumer of every filter would hand them. The server reads
// a consumer of several filters by intersecting each message block's
// subject index with the filters for every message it delivers: over a
// history of many subjects (a report subject per device) that is
// hundreds of microseconds a record, twenty times a consumer of one
// filter (docs/performance.md, "Reading several filters").
func (s *Store) replayMerged(ctx context.Context, stream string, filters []string, from Start) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		filter := strings.Join(filters, ",") // for errors
		str, err := s.js.Stream(ctx, stream)
		if err != nil {
			yield(Record{}, fmt.Errorf("replay %s: %w", filter, err))
			return
		}
		upTo := str.CachedInfo().State.LastSeq
		if upTo == 0 {
			return
		}
		pullers := make([]*puller, 0, len(filters))
		defer func() {
			for _, p := range pullers {
				p.close()
			}
		}()
		type head struct {
			rec Record
			err error
			p   *puller
		}
		heads := make([]*head, 0, len(filters))
		for _, f := range filters {
			p, err := s.newPuller(ctx, stream, f, from, upTo)
			if err != nil {
				yield(Record{}, err)
				return
			}
			pullers = append(pullers, p)
			h := &head{p: p}
			var ok bool
			if h.rec, h.err, ok = p.next(); ok {
				heads = append(heads, h)
			}
		}
		var last uint64
		for len(heads) > 0 {
			i := 0
			for j, h := range heads {
				if _, ok := AsRecordError(h.err); h.err != nil && !ok {
					// The read failed: it ends the replay.
					yield(Record{}, h.err)
					return
				}
				if h.rec.Sequence < heads[i].rec.Sequence {
					i = j
				}
			}
			h := heads[i]
			if h.rec.Sequence > last { // filters that overlap hand a record once
				last = h.rec.Sequence
				if !yield(h.rec, h.err) {
					return
				}
			}
			var ok bool
			if h.rec, h.err, ok = h.p.next(); !ok {
				heads = append(heads[:i], heads[i+1:]...)
			}
		}
	}
}

// streamOfAll returns the one stream every filter belongs to.
func streamOfAll(filters []string) (string, error) {
	if len(filters) == 0 {
		return "", fmt.Errorf("%w: no subject filter", ErrInvalidSubject)
	}
	stream, err := StreamOf(filters[0])
	if err != nil {
		return "", err
	}
	for _, f := range filters[1:] {
		other, err := StreamOf(f)
		if err != nil {
			return "", err
		}
		if other != stream {
			return "", fmt.Errorf("%w: %s is in %s and %s in %s: one read follows one stream", ErrInvalidSubject, filters[0], stream, f, other)
		}
	}
	return stream, nil
}

// Last returns the last event stored on one subject (no wildcards) by a
// direct get. ErrNotFound when the subject has none. When the last message
// does not decode, the error is a *RecordError (errors.Is ErrUndecodable)
// and the Record carries where it is stored (a zero Event).
func (s *Store) Last(ctx context.Context, subject string) (Record, error) {
	stream, err := StreamOf(subject)
	if err != nil {
		return Record{}, err
	}
	if strings.ContainsAny(subject, "*>") {
		return Record{}, fmt.Errorf("last on %s: name one subject, not a wildcard", subject)
	}
	// The subject-scoped direct get, answered by the server; the headers
	// are read as storedHeaders reads them (a stored message's own headers
	// come first and may be a device's).
	rctx, cancel := context.WithTimeout(ctx, directGetTimeout)
	defer cancel()
	m, err := s.nc.RequestWithContext(rctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return Record{}, fmt.Errorf("last on %s: %w", subject, err)
	}
	h, ok := storedHeaders(m)
	if !ok {
		if st := m.Header.Get("Status"); st == "404" {
			return Record{}, fmt.Errorf("%w on %s", ErrNotFound, subject)
		}
		return Record{}, fmt.Errorf("last on %s: server answered %s %s", subject, m.Header.Get("Status"), m.Header.Get("Description"))
	}
	if h.subject != subject {
		return Record{}, fmt.Errorf("last on %s: the server answered for subject %s", subject, h.subject)
	}
	rec := Record{Subject: subject, Stream: stream, Sequence: h.seq, Stored: h.stored}
	ev, err := DecodeStored(subject, m.Data)
	if err != nil {
		return rec, located(err, rec)
	}
	rec.Event = ev
	return rec, nil
}

// directGetTimeout bounds one direct get when ctx has no earlier deadline.
const directGetTimeout = 10 * time.Second

// stored is where and when the server stored a message a direct get
// returned.
type stored struct {
	subject string
	seq     uint64
	stored  time.Time
}

// storedHeaders reads the server's Nats-Subject, Nats-Sequence and
// Nats-Time-Stamp headers of a direct-get answer. A stored message keeps the
// headers its publisher sent (a device's, on a report subject: hostile),
// and the server appends its own after them, so the last value of each is
// the server's; a publisher that sent the same names only adds earlier
// values. An answer without a Nats-Sequence header is the server's status
// (end of batch, not found, error), whatever else its headers say: every
// stored message gets one. ok is false for a status.
func storedHeaders(m *nats.Msg) (stored, bool) {
	last := func(k string) string {
		v := m.Header.Values(k)
		if len(v) == 0 {
			return ""
		}
		return v[len(v)-1]
	}
	seqs := m.Header.Values(jetstream.SequenceHeader)
	if len(seqs) == 0 {
		return stored{}, false
	}
	seq, err := strconv.ParseUint(seqs[len(seqs)-1], 10, 64)
	if err != nil {
		return stored{}, false
	}
	t, _ := time.Parse(time.RFC3339Nano, last(jetstream.TimeStampHeaer))
	return stored{subject: last(jetstream.SubjectHeader), seq: seq, stored: t}, true
}

// multiLastLimit is the server's cap on subjects one multi-last direct get
// may match (nats-server answers 413 beyond it).
const multiLastLimit = 1024

// errTooManySubjects is returned by a direct multi-last get when the filter
// matches more subjects than the server allows in one request; LastPerSubject
// then falls back to a consumer.
var errTooManySubjects = errors.New("too many subjects for one direct get")

// LastPerSubject returns the last event of every subject matching filter, in
// stream order. A last message that does not decode is left out, counted on
// StoreOptions.Skips and logged at warning level on StoreOptions.Logger. It uses the batched direct get (multi_last), pinned to one
// stream sequence so the answer is a consistent cut; when the filter matches
// more subjects than one direct get may return (1024), it falls back to an
// ordered consumer with the last-per-subject deliver policy.
func (s *Store) LastPerSubject(ctx context.Context, filter string) ([]Record, error) {
	stream, err := StreamOf(filter)
	if err != nil {
		return nil, err
	}
	recs, err := s.directMultiLast(ctx, stream, filter)
	if errors.Is(err, errTooManySubjects) {
		return s.consumerLastPerSubject(ctx, stream, filter)
	}
	return recs, err
}

// directMultiLast pages through a multi_last direct get.
func (s *Store) directMultiLast(ctx context.Context, stream, filter string) ([]Record, error) {
	type request struct {
		MultiLast []string `json:"multi_last"`
		Seq       uint64   `json:"seq,omitempty"`
		UpToSeq   uint64   `json:"up_to_seq,omitempty"`
		Batch     int      `json:"batch,omitempty"`
	}
	var out []Record
	req := request{MultiLast: []string{filter}, Batch: multiLastLimit}
	for {
		body, _ := json.Marshal(req)
		inbox := s.nc.NewRespInbox()
		sub, err := s.nc.SubscribeSync(inbox)
		if err != nil {
			return nil, fmt.Errorf("last per subject %s: %w", filter, err)
		}
		err = s.nc.PublishMsg(&nats.Msg{Subject: "$JS.API.DIRECT.GET." + stream, Reply: inbox, Data: body})
		if err != nil {
			_ = sub.Unsubscribe()
			return nil, fmt.Errorf("last per subject %s: %w", filter, err)
		}
		page, more, upTo, last, err := s.readMultiLast(ctx, sub, stream, filter)
		_ = sub.Unsubscribe()
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if !more || last == 0 {
			return out, nil
		}
		req.Seq = last + 1
		req.UpToSeq = upTo
	}
}

// readMultiLast reads one page of a multi_last answer up to its end-of-batch
// marker; last is the sequence of the page's last message, decoded or not.
func (s *Store) readMultiLast(ctx context.Context, sub *nats.Subscription, stream, filter string) (recs []Record, more bool, upTo, last uint64, err error) {
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, false, 0, 0, fmt.Errorf("last per subject %s: %w", filter, err)
		}
		h, ok := storedHeaders(m)
		if !ok {
			// The server's status: a stored message always has a
			// Nats-Sequence header, so a Status header a device stored
			// never ends the batch.
			switch status := m.Header.Get("Status"); status {
			case "204": // end of batch
				pending, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				upTo, _ = strconv.ParseUint(m.Header.Get("Nats-UpTo-Sequence"), 10, 64)
				return recs, pending > 0, upTo, last, nil
			case "404":
				return recs, false, 0, last, nil
			case "413":
				return nil, false, 0, 0, errTooManySubjects
			default:
				return nil, false, 0, 0, fmt.Errorf("last per subject %s: server answered %q %s", filter, status, m.Header.Get("Description"))
			}
		}
		last = h.seq
		rec := Record{Subject: h.subject, Stream: stream, Sequence: h.seq, Stored: h.stored}
		ev, err := DecodeStored(rec.Subject, m.Data)
		if err != nil {
			s.skip(ctx, located(err, rec))
			continue
		}
		rec.Event = ev
		recs = append(recs, rec)
	}
}

// consumerLastPerSubject is the fallback for filters matching many subjects.
func (s *Store) consumerLastPerSubject(ctx context.Context, stream, filter string) ([]Record, error) {
	cons, err := s.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    []string{filter},
		DeliverPolicy:     jetstream.DeliverLastPerSubjectPolicy,
		InactiveThreshold: consumerInactiveThreshold,
	})
	if err != nil {
		return nil, fmt.Errorf("last per subject %s: %w", filter, err)
	}
	msgs, err := cons.Messages(jetstream.PullMaxMessages(ReplayBatchSize))
	if err != nil {
		return nil, fmt.Errorf("last per subject %s: %w", filter, err)
	}
	defer s.stopOrdered(stream, cons, msgs)
	var out []Record
	if info := cons.CachedInfo(); info != nil && info.NumPending == 0 {
		return nil, nil
	}
	for {
		m, err := msgs.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("last per subject %s: %w", filter, err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, fmt.Errorf("last per subject %s: %w", filter, err)
		}
		rec := Record{Subject: m.Subject(), Stream: md.Stream, Sequence: md.Sequence.Stream, Stored: md.Timestamp}
		if ev, err := DecodeStored(rec.Subject, m.Data()); err != nil {
			s.skip(ctx, located(err, rec))
		} else {
			rec.Event = ev
			out = append(out, rec)
		}
		if md.NumPending == 0 {
			return out, nil
		}
	}
}

// consumerInactiveThreshold is how long the server keeps a read's ordered
// consumer after its client vanished without deleting it.
const consumerInactiveThreshold = 30 * time.Second

// maxResetAttempts bounds how often a read's ordered consumer is recreated
// by the client after it lost it (missed heartbeats, a sequence gap) before
// the read fails with the client's error. The client's default is no
// bound: its retry loop (1 s doubling to 10 s, each attempt up to 10 s)
// does not watch the read's context, so a consumer that cannot be
// recreated on the stream as the client sees it — seen after the SIGKILL
// of the server holding the client's connection and the stream's leader —
// kept the read stuck, unstoppable, for good. With a bound the read fails
// within about half a minute, and its reader reads again from after the
// last record it handled with a fresh consumer, which has worked there.
const maxResetAttempts = 3

// stopOrdered stops a read and deletes its server-side consumer at once, so
// frequent reads leave nothing behind (an ordered consumer otherwise lingers
// until its inactive threshold).
func (s *Store) stopOrdered(stream string, cons jetstream.Consumer, msgs jetstream.MessagesContext) {
	msgs.Stop()
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.js.DeleteConsumer(ctx, stream, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		s.log.Debug("delete read consumer", "stream", stream, "consumer", info.Name, "error", err)
	}
}

// located sets where a record that DecodeStored refused is stored.
func located(err error, rec Record) error {
	re, ok := AsRecordError(err)
	if !ok {
		return err
	}
	re.Stream, re.Subject, re.Sequence = rec.Stream, rec.Subject, rec.Sequence
	return re
}

// skip counts and logs a record a read that returns a slice leaves out.
func (s *Store) skip(ctx context.Context, err error) {
	if re, ok := AsRecordError(err); ok {
		s.skips.Skip(ctx, s.log, re)
	}
}

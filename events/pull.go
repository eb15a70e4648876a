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

// A replay reads one filter with an ephemeral consumer it pulls from
// itself on a core subscription, not through jetstream's ordered consumer:
// that client's Messages().Next arms a heartbeat timer, wraps the message
// and splits its reply subject twice for every record, about a third of
// a replay's client CPU and allocations over a long history
// (docs/performance.md, "A replay's own pulls"). The reader checks what
// the ordered consumer checks: every message is the consumer's next
// delivery (no gap) and comes after the one before it in the stream; on
// a delivery out of order, or a consumer that failed, it starts another
// from after the last record it returned (puller.reset).

// pullBatch is how many messages one pull request asks for; a new request
// goes out when less than half of what was asked for is still to come.
const pullBatch = 8192

// pullExpires is how long the server keeps one pull request waiting;
// pullHeartbeat how often it says it is alive while it has nothing to
// send. A read that waited pullStalled for a message and heard nothing
// starts its consumer again.
const (
	pullExpires   = 30 * time.Second
	pullHeartbeat = 5 * time.Second
	pullStalled   = 3 * pullHeartbeat
)

// errPullStalled is a read that waited pullStalled and heard nothing from
// the server, not even a heartbeat.
var errPullStalled = errors.New("the server sent nothing, not even a heartbeat")

// errPullOrder is a delivery that is not the consumer's next, or not
// later in the stream than the one before it.
var errPullOrder = errors.New("a delivery out of order")

// puller reads one filter of a stream from a start to upTo, in stream
// order. When its consumer fails (the server deleted it while the puller
// was not read, a delivery out of order, the server silent) it creates
// another from after the last record it returned, up to maxResetAttempts
// times in a row, as jetstream's ordered consumer does.
type puller struct {
	s      *Store
	ctx    context.Context
	stream string
	filter string
	from   Start
	name   string // the consumer
	sub    *nats.Subscription
	upTo   uint64
	asked  int    // messages asked for and not yet received
	dseq   uint64 // the consumer's last delivery
	sseq   uint64 // the stream sequence of the last record returned
	resets int    // resets since the last record
	done   bool
}

// pullReplay is Replay of one filter of stream by a puller, up to upTo (0:
// the stream's last sequence when it begins).
func (s *Store) pullReplay(ctx context.Context, stream, filter string, from Start, upTo uint64) iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		p, err := s.newPuller(ctx, stream, filter, from, upTo)
		if err != nil {
			yield(Record{}, err)
			return
		}
		defer p.close()
		for {
			rec, err, ok := p.next()
			if !ok || !yield(rec, err) {
				return
			}
			if _, isRecord := AsRecordError(err); err != nil && !isRecord {
				return
			}
		}
	}
}

// newPuller starts a read of filter from from up to upTo (0: the stream's
// last sequence now).
func (s *Store) newPuller(ctx context.Context, stream, filter string, from Start, upTo uint64) (*puller, error) {
	if upTo == 0 {
		str, err := s.js.Stream(ctx, stream)
		if err != nil {
			return nil, fmt.Errorf("replay %s: %w", filter, err)
		}
		upTo = str.CachedInfo().State.LastSeq
	}
	p := &puller{s: s, ctx: ctx, stream: stream, filter: filter, from: from, upTo: upTo}
	if upTo == 0 {
		p.done = true
		return p, nil
	}
	if err := p.start(); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// start creates the consumer (from after the last record returned, or
// the read's start), subscribes to its deliveries and asks for the first
// batch.
func (p *puller) start() error {
	ocfg := jetstream.OrderedConsumerConfig{}
	if p.sseq > 0 {
		FromSequence(p.sseq + 1).apply(&ocfg)
	} else {
		p.from.apply(&ocfg)
	}
	cfg := jetstream.ConsumerConfig{FilterSubject: p.filter, AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Replicas: 1,
		InactiveThreshold: consumerInactiveThreshold, DeliverPolicy: ocfg.DeliverPolicy, OptStartSeq: ocfg.OptStartSeq,
		OptStartTime: ocfg.OptStartTime}
	cons, err := p.s.js.CreateConsumer(p.ctx, p.stream, cfg)
	if err != nil {
		return fmt.Errorf("replay %s: %w", p.filter, err)
	}
	info := cons.CachedInfo()
	p.name, p.dseq, p.asked = info.Name, 0, 0
	if info.NumPending == 0 {
		p.done = true
		p.deleteConsumer()
		return nil
	}
	p.sub, err = p.s.nc.SubscribeSync(p.s.nc.NewInbox())
	if err == nil {
		// At most a request and a half are in flight; the limit is
		// never reached unless the server sends what was not asked.
		err = p.sub.SetPendingLimits(4*pullBatch, -1)
	}
	if err != nil {
		return fmt.Errorf("replay %s: %w", p.filter, err)
	}
	return p.ask()
}

// reset replaces a consumer that failed with cause; an error when it
// failed maxResetAttempts times in a row or cannot be replaced.
func (p *puller) reset(cause error) error {
	p.resets++
	if p.resets > maxResetAttempts || p.ctx.Err() != nil {
		return fmt.Errorf("replay %s: %w", p.filter, cause)
	}
	p.s.log.Debug("replay consumer failed; starting another after the last record", "filter", p.filter,
		"after", p.sseq, "error", cause)
	p.stop()
	return p.start()
}

// ask sends one pull request for pullBatch messages.
func (p *puller) ask() error {
	req, _ := json.Marshal(struct {
		Batch     int           `json:"batch"`
		Expires   time.Duration `json:"expires"`
		Heartbeat time.Duration `json:"idle_heartbeat"`
	}{pullBatch, pullExpires, pullHeartbeat})
	err := p.s.nc.PublishMsg(&nats.Msg{Subject: "$JS.API.CONSUMER.MSG.NEXT." + p.stream + "." + p.name, Reply: p.sub.Subject, Data: req})
	if err != nil {
		return fmt.Errorf("replay %s: pull: %w", p.filter, err)
	}
	p.asked += pullBatch
	return nil
}

// wait returns the next message of the subscription: at once when one is
// there, else within pullStalled (errPullStalled), or ctx's error.
func (p *puller) wait() (*nats.Msg, error) {
	if n, _, _ := p.sub.Pending(); n > 0 {
		return p.sub.NextMsgWithContext(p.ctx)
	}
	ctx, cancel := context.WithTimeoutCause(p.ctx, pullStalled, errPullStalled)
	defer cancel()
	m, err := p.sub.NextMsgWithContext(ctx)
	if err != nil && p.ctx.Err() == nil && ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return m, err
}

// next returns the next record (or a *RecordError for one that does not
// decode, or the error that ends the read); ok is false once the read
// reached upTo or ended.
func (p *puller) next() (Record, error, bool) {
	for !p.done {
		m, err := p.wait()
		if errors.Is(err, errPullStalled) || errors.Is(err, nats.ErrNoResponders) {
			// Silence, or a request to a consumer that is gone.
			err = p.reset(err)
			if err == nil {
				continue
			}
		}
		if err != nil {
			p.done = true
			return Record{}, fmt.Errorf("replay %s: %w", p.filter, err), true
		}
		if len(m.Data) == 0 && m.Header.Get("Status") != "" {
			if err := p.status(m); err != nil {
				if err = p.reset(err); err != nil {
					p.done = true
					return Record{}, err, true
				}
			}
			continue
		}
		p.asked--
		if p.asked < pullBatch/2 {
			if err := p.ask(); err != nil {
				p.done = true
				return Record{}, err, true
			}
		}
		sseq, dseq, ts, pending, ok := ackFields(m.Reply)
		if !ok || dseq != p.dseq+1 || sseq <= p.sseq {
			err := fmt.Errorf("%w: delivery %d of stream sequence %d after delivery %d of %d", errPullOrder, dseq, sseq, p.dseq, p.sseq)
			if err = p.reset(err); err != nil {
				p.done = true
				return Record{}, err, true
			}
			continue
		}
		p.dseq = dseq
		if sseq > p.upTo {
			p.done = true
			return Record{}, nil, false
		}
		p.sseq, p.resets = sseq, 0
		p.done = pending == 0 || sseq == p.upTo
		rec := Record{Subject: m.Subject, Stream: p.stream, Sequence: sseq, Stored: time.Unix(0, ts)}
		ev, err := decodeOwned(rec.Subject, m.Data)
		if err != nil {
			return rec, located(err, rec), true
		}
		rec.Event = ev
		return rec, nil, true
	}
	return Record{}, nil, false
}

// status handles a status message of the server: a heartbeat, an expired
// request (ask again); anything else (the consumer deleted, no responder
// for a request to a consumer that is gone) is the consumer's failure.
func (p *puller) status(m *nats.Msg) error {
	switch code := m.Header.Get("Status"); code {
	case "100": // idle heartbeat
		return nil
	case "408": // the request expired with messages still to send
		n, _ := strconv.Atoi(m.Header.Get("Nats-Pending-Messages"))
		p.asked = max(p.asked-n, 0)
		if p.asked < pullBatch/2 {
			return p.ask()
		}
		return nil
	default:
		return fmt.Errorf("the server answered %s %s", code, m.Header.Get("Description"))
	}
}

// stop ends the subscription and deletes the consumer.
func (p *puller) stop() {
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
		p.sub = nil
	}
	p.deleteConsumer()
}

// close stops the read.
func (p *puller) close() {
	p.done = true
	p.stop()
}

func (p *puller) deleteConsumer() {
	if p.name == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.s.js.DeleteConsumer(ctx, p.stream, p.name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		p.s.log.Debug("delete read consumer", "stream", p.stream, "consumer", p.name, "error", err)
	}
	p.name = ""
}

// ackFields reads a delivery's reply subject, $JS.ACK.<stream>.<consumer>.
// <delivered>.<stream seq>.<consumer seq>.<time>.<pending> (or the longer
// form with a domain and an account hash before the stream, and possibly
// a token after), without allocating.
func ackFields(reply string) (sseq, dseq uint64, ts int64, pending uint64, ok bool) {
	if !strings.HasPrefix(reply, "$JS.ACK.") {
		return 0, 0, 0, 0, false
	}
	var tok [12]string
	n := 0
	for rest := reply; n < len(tok); n++ {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			tok[n] = rest
			n++
			break
		}
		tok[n], rest = rest[:i], rest[i+1:]
	}
	var first int // the token of the delivered count
	switch {
	case n == 9:
		first = 4
	case n >= 11:
		first = 6
	default:
		return 0, 0, 0, 0, false
	}
	var err1, err2, err3, err4 error
	sseq, err1 = strconv.ParseUint(tok[first+1], 10, 64)
	dseq, err2 = strconv.ParseUint(tok[first+2], 10, 64)
	ts, err3 = strconv.ParseInt(tok[first+3], 10, 64)
	pending, err4 = strconv.ParseUint(tok[first+4], 10, 64)
	return sseq, dseq, ts, pending, err1 == nil && err2 == nil && err3 == nil && err4 == nil
}

// decodeOwned is DecodeStored of a payload the caller owns and never
// changes.
func decodeOwned(subject string, payload []byte) (Event, error) {
	ev, reason, err := decodeStoredWith(subject, payload, unmarshalOwnedEnvelope)
	if err != nil {
		stream, _ := StreamOf(subject)
		return Event{}, &RecordError{Stream: stream, Subject: subject, Size: len(payload), Reason: reason, Err: err}
	}
	return ev, nil
}

package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A replay reads one filter with an ephemeral consumer it pulls from
// itself on a core subscription, not through jetstream's ordered consumer:
// that client's Messages().Next arms a heartbeat timer, wraps the message
// and splits its reply subject twice for every record, about a third of
// a replay's client CPU and allocations over a long history
// (docs/performance.md, "Reading a stream's history"). The reader checks
// what the ordered consumer checks: every message is the consumer's next
// delivery (no gap) and comes after the one before it in the stream; a
// read that sees otherwise fails, and its reader reads again from after
// the last record it handled.

// pullBatch is how many messages one pull request asks for; a new request
// goes out when less than half of what was asked for is still to come.
const pullBatch = 8192

// pullExpires is how long the server keeps one pull request waiting;
// pullHeartbeat how often it says it is alive while it has nothing to
// send. A read that hears nothing for pullStalled fails.
const (
	pullExpires   = 30 * time.Second
	pullHeartbeat = 5 * time.Second
	pullStalled   = 3 * pullHeartbeat
)

// errPullStalled ends a read that heard nothing from the server for
// pullStalled.
var errPullStalled = errors.New("the server sent nothing, not even a heartbeat")

// errPullOrder ends a read whose consumer skipped or reordered a delivery.
var errPullOrder = errors.New("a delivery out of order")

// puller reads one filter of a stream from a start to upTo, in stream
// order.
type puller struct {
	s       *Store
	ctx     context.Context
	cancel  context.CancelCauseFunc
	stream  string
	filter  string
	name    string // the consumer
	sub     *nats.Subscription
	upTo    uint64
	asked   int    // messages asked for and not yet received
	dseq    uint64 // the consumer's last delivery
	sseq    uint64 // the stream sequence of the last delivery
	heard   atomic.Int64
	done    bool
	watched chan struct{}
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

// newPuller creates the consumer and subscribes to its deliveries.
func (s *Store) newPuller(ctx context.Context, stream, filter string, from Start, upTo uint64) (*puller, error) {
	if upTo == 0 {
		str, err := s.js.Stream(ctx, stream)
		if err != nil {
			return nil, fmt.Errorf("replay %s: %w", filter, err)
		}
		upTo = str.CachedInfo().State.LastSeq
	}
	p := &puller{s: s, stream: stream, filter: filter, upTo: upTo, watched: make(chan struct{})}
	if upTo == 0 {
		p.done = true
		close(p.watched)
		return p, nil
	}
	ocfg := jetstream.OrderedConsumerConfig{}
	from.apply(&ocfg)
	cfg := jetstream.ConsumerConfig{FilterSubject: filter, AckPolicy: jetstream.AckNonePolicy, MemoryStorage: true, Replicas: 1,
		InactiveThreshold: consumerInactiveThreshold, DeliverPolicy: ocfg.DeliverPolicy, OptStartSeq: ocfg.OptStartSeq,
		OptStartTime: ocfg.OptStartTime}
	cons, err := s.js.CreateConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("replay %s: %w", filter, err)
	}
	info := cons.CachedInfo()
	p.name = info.Name
	if info.NumPending == 0 {
		p.done = true
		close(p.watched)
		p.deleteConsumer()
		return p, nil
	}
	p.sub, err = s.nc.SubscribeSync(s.nc.NewInbox())
	if err == nil {
		// Two requests' worth may be in flight; the read never falls
		// behind by more.
		err = p.sub.SetPendingLimits(4*pullBatch, -1)
	}
	if err != nil {
		p.close()
		return nil, fmt.Errorf("replay %s: %w", filter, err)
	}
	p.ctx, p.cancel = context.WithCancelCause(ctx)
	p.heard.Store(time.Now().UnixNano())
	go p.watch()
	if err := p.ask(); err != nil {
		p.close()
		return nil, err
	}
	return p, nil
}

// watch cancels the read when the server was not heard for pullStalled: one
// timer for the read, not one per message.
func (p *puller) watch() {
	defer close(p.watched)
	t := time.NewTicker(pullHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
			if time.Since(time.Unix(0, p.heard.Load())) > pullStalled {
				p.cancel(errPullStalled)
				return
			}
		}
	}
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

// next returns the next record (or a *RecordError for one that does not
// decode, or the error that ends the read); ok is false once the read
// reached upTo or ended.
func (p *puller) next() (Record, error, bool) {
	for !p.done {
		m, err := p.sub.NextMsgWithContext(p.ctx)
		if err != nil {
			p.done = true
			if cause := context.Cause(p.ctx); cause != nil && p.ctx.Err() != nil {
				err = cause
			}
			return Record{}, fmt.Errorf("replay %s: %w", p.filter, err), true
		}
		p.heard.Store(time.Now().UnixNano())
		if len(m.Data) == 0 && m.Header.Get("Status") != "" {
			if err := p.status(m); err != nil {
				p.done = true
				return Record{}, err, true
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
			p.done = true
			return Record{}, fmt.Errorf("replay %s: %w: delivery %d of stream sequence %d after delivery %d of %d", p.filter, errPullOrder, dseq, sseq, p.dseq, p.sseq), true
		}
		p.dseq, p.sseq = dseq, sseq
		if sseq > p.upTo {
			p.done = true
			return Record{}, nil, false
		}
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
// request (ask again), anything else ends the read.
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
		return fmt.Errorf("replay %s: the server answered %s %s", p.filter, code, m.Header.Get("Description"))
	}
}

// close stops the read and deletes its consumer.
func (p *puller) close() {
	if p.cancel != nil {
		p.cancel(nil)
	}
	<-p.watched
	if p.sub != nil {
		_ = p.sub.Unsubscribe()
	}
	p.deleteConsumer()
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

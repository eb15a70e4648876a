package devicelogs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
)

// closedGrace is how long a closed request's late chunks are dropped
// quietly rather than counted as unrequested.
const closedGrace = time.Minute

// Reader opens log streams of devices for one process: it holds one
// subscription per device it reads, fleet.logs.<device>.<reader id>.*,
// while a stream of that device is open. Safe for concurrent use.
type Reader struct {
	o  Options
	id string

	mu      sync.Mutex
	devices map[string]*deviceSubs
}

// deviceSubs are one device's subscription and open streams.
type deviceSubs struct {
	sub     *nats.Subscription
	streams map[string]*Stream   // by request id
	closed  map[string]time.Time // request id → when closed
}

// New returns a Reader with a new random reader id.
func New(o Options) (*Reader, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	return &Reader{o: o.withDefaults(), id: id, devices: map[string]*deviceSubs{}}, nil
}

// ID is the reader id every answer subject of this Reader carries.
func (rd *Reader) ID() string { return rd.id }

// randomID is 32 hex digits from crypto/rand.
func randomID() (string, error) {
	var b [events.LogsIDLength / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("devicelogs: random id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Open authorizes r with auth, records the attempt in FLEET_AUDIT, and
// asks the device: it returns the stream of its answer. A refusal is
// recorded and returned wrapping ErrDenied; nothing is asked of the device
// then. Close the stream when done.
func (rd *Reader) Open(ctx context.Context, r Request, auth Authorizer) (*Stream, error) {
	return rd.open(ctx, r, auth, false)
}

// open is Open of a log, or of a diagnosis when diagnose is set.
func (rd *Reader) open(ctx context.Context, r Request, auth Authorizer, diagnose bool) (*Stream, error) {
	if err := r.validate(diagnose); err != nil {
		return nil, err
	}
	if auth == nil {
		return nil, errors.New("devicelogs: Open: no Authorizer: every read is authorized")
	}
	request, err := randomID()
	if err != nil {
		return nil, err
	}
	if err := auth.Authorize(ctx, r); err != nil {
		reason := err.Error()
		if !errors.Is(err, ErrDenied) {
			err = fmt.Errorf("%w: the authorization could not be decided: %w", ErrDenied, err)
			reason = err.Error()
		}
		if aerr := rd.audit(ctx, r, request, diagnose, false, reason, ""); aerr != nil {
			return nil, errors.Join(err, aerr)
		}
		return nil, err
	}
	s, err := rd.register(r, request)
	if s != nil {
		s.diagnose = diagnose
	}
	if err != nil {
		if aerr := rd.audit(ctx, r, request, diagnose, false, err.Error(), ""); aerr != nil {
			return nil, errors.Join(err, aerr)
		}
		return nil, err
	}
	if err := rd.audit(ctx, r, request, diagnose, true, "", ""); err != nil {
		s.release()
		return nil, err
	}
	if diagnose {
		if err := rd.command(ctx, r.Device, events.CommandDiagnose, r.Who.User, &events.LogsRequest{Reader: rd.id, Request: request}); err != nil {
			s.release()
			return nil, err
		}
		s.asked = rd.o.Now()
		return s, nil
	}
	lr := &events.LogsRequest{Reader: rd.id, Request: request, Namespace: r.Namespace, Deployment: r.Deployment, Service: r.Service,
		Tail: r.Tail, Since: r.Since, Follow: r.Follow}
	if r.Follow {
		lr.FollowSeconds = int(rd.o.MaxFollow / time.Second)
	}
	if err := rd.command(ctx, r.Device, events.CommandLogs, r.Who.User, lr); err != nil {
		s.release()
		return nil, err
	}
	s.asked = rd.o.Now()
	return s, nil
}

// audit appends the device.logs.requested record; refusedBy is
// events.RefusedByDevice for the record of the device's refusal, empty
// for the record written before the device is asked.
func (rd *Reader) audit(ctx context.Context, r Request, request string, diagnose, allowed bool, reason, refusedBy string) error {
	ev, err := events.New(events.Keys{Device: r.Device}, events.DeviceLogsRequested{Namespace: r.Namespace, Deployment: r.Deployment,
		Service: r.Service, User: r.Who.User, UserSubject: r.Who.UserSubject, Via: r.Who.Via, Request: request, Tail: r.Tail,
		Since: r.Since, Follow: r.Follow, Diagnose: diagnose, Allowed: allowed, Reason: reason, RefusedBy: refusedBy})
	if err != nil {
		return fmt.Errorf("devicelogs: audit record: %w", err)
	}
	if _, err := rd.o.Store.Append(ctx, ev); err != nil {
		return fmt.Errorf("devicelogs: record the request in %s: %w", events.StreamAudit, err)
	}
	return nil
}

// command appends an agent.command for device.
func (rd *Reader) command(ctx context.Context, device, command, by string, lr *events.LogsRequest) error {
	ev, err := events.New(events.Keys{Device: device}, events.AgentCommand{Command: command, RequestedBy: by, Logs: lr})
	if err != nil {
		return fmt.Errorf("devicelogs: %s command: %w", command, err)
	}
	if _, err := rd.o.Store.Append(ctx, ev); err != nil {
		return fmt.Errorf("devicelogs: ask the device (%s): %w", command, err)
	}
	return nil
}

// register opens the stream of request, subscribing to the device when
// it is the first.
func (rd *Reader) register(r Request, request string) (*Stream, error) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	d := rd.devices[r.Device]
	if d != nil && len(d.streams) >= rd.o.MaxStreamsPerDevice {
		return nil, fmt.Errorf("%w: %d of device %s in this reader, the most (close one first)", ErrTooManyStreams, len(d.streams), r.Device)
	}
	if d == nil {
		filter, err := events.LogsReaderFilter(r.Device, rd.id)
		if err != nil {
			return nil, err
		}
		d = &deviceSubs{streams: map[string]*Stream{}, closed: map[string]time.Time{}}
		device := r.Device
		sub, err := rd.o.Conn.Subscribe(filter, func(m *nats.Msg) { rd.receive(device, m) })
		if err != nil {
			return nil, fmt.Errorf("devicelogs: subscribe to device %s's answers: %w", r.Device, err)
		}
		if err := rd.o.Conn.Flush(); err != nil {
			_ = sub.Unsubscribe()
			return nil, fmt.Errorf("devicelogs: subscribe to device %s's answers: %w", r.Device, err)
		}
		d.sub = sub
		rd.devices[r.Device] = d
	}
	s := newStream(rd, r, request)
	d.streams[request] = s
	rd.o.Metrics.opened(1)
	return s, nil
}

// unregister forgets a stream; the device's subscription goes with its
// last stream.
func (rd *Reader) unregister(s *Stream) {
	rd.mu.Lock()
	defer rd.mu.Unlock()
	d := rd.devices[s.r.Device]
	if d == nil || d.streams[s.request] != s {
		return
	}
	delete(d.streams, s.request)
	rd.o.Metrics.opened(-1)
	now := time.Now()
	for id, at := range d.closed {
		if now.Sub(at) > closedGrace {
			delete(d.closed, id)
		}
	}
	d.closed[s.request] = now
	if len(d.streams) == 0 {
		_ = d.sub.Unsubscribe()
		delete(rd.devices, s.r.Device)
	}
}

// receive takes one message of a device's subscription.
func (rd *Reader) receive(device string, m *nats.Msg) {
	request := m.Subject[strings.LastIndexByte(m.Subject, '.')+1:]
	rd.mu.Lock()
	d := rd.devices[device]
	var s *Stream
	var closed bool
	var open []*Stream
	if d != nil {
		s = d.streams[request]
		_, closed = d.closed[request]
		if s == nil && !closed {
			for _, o := range d.streams {
				open = append(open, o)
			}
		}
	}
	rd.mu.Unlock()
	switch {
	case s != nil:
		s.take(m)
	case closed || d == nil:
		// A late chunk of a closed request, or one that arrived while
		// unsubscribing.
	default:
		rd.o.Metrics.cutOff(ReasonUnrequested)
		rd.o.Logger.Warn("a device answered a logs request this reader did not ask: cut off", "device", device)
		for _, o := range open {
			o.fail(&CutOffError{Device: device, Reason: ReasonUnrequested, Detail: "it answered a request id this reader did not ask"})
		}
	}
}

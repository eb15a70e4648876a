package devicelogs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
)

// maxDeviceError bounds the text of a DeviceError.
const maxDeviceError = 512

// Stream is one open request's answer. Next returns its lines; Close
// ends it. Next is for one goroutine; Close may be called from any.
type Stream struct {
	rd       *Reader
	r        Request
	request  string
	diagnose bool
	asked    time.Time

	queue  chan events.LogsChunk
	failed chan struct{} // closed by fail
	once   sync.Once
	err    error // set before failed is closed

	// Accounting, in the subscription's goroutine only.
	seq    uint64
	bytes  int64
	tokens float64
	refill time.Time

	// diagnosis is the last chunk's and got says a chunk came, for
	// Next's goroutine only.
	diagnosis *events.DeviceDiagnosis
	got       bool

	mu     sync.Mutex
	offset time.Duration // device clock minus control plane clock
	ended  bool
	closed bool
}

func newStream(rd *Reader, r Request, request string) *Stream {
	return &Stream{rd: rd, r: r, request: request, queue: make(chan events.LogsChunk, queueChunks), failed: make(chan struct{}),
		tokens: float64(rd.o.Burst), refill: time.Now()}
}

// Request is the request id (the audit record's and the answer subject's).
func (s *Stream) Request() string { return s.request }

// ClockOffset is the device's clock minus the control plane's when its
// last chunk arrived (transit time included: an upper bound of how far
// ahead it runs).
func (s *Stream) ClockOffset() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offset
}

// fail ends the stream with err (the first failure wins).
func (s *Stream) fail(err error) {
	s.once.Do(func() {
		s.err = err
		close(s.failed)
	})
}

// cut ends the stream because the device broke a bound, and counts it.
func (s *Stream) cut(reason, detail string) {
	s.rd.o.Metrics.cutOff(reason)
	s.rd.o.Logger.Warn("a device broke a bound of its log stream: cut off", "device", s.r.Device, "reason", reason, "detail", detail)
	s.fail(&CutOffError{Device: s.r.Device, Reason: reason, Detail: detail})
}

// take accounts one message of the request and queues its chunk.
func (s *Stream) take(m *nats.Msg) {
	select {
	case <-s.failed:
		return
	default:
	}
	o := s.rd.o
	n := len(m.Data)
	for k, v := range m.Header {
		n += len(k)
		for _, x := range v {
			n += len(x)
		}
	}
	if n > MaxChunk {
		s.cut(ReasonSize, fmt.Sprintf("a chunk of %d bytes, over %d", n, MaxChunk))
		return
	}
	now := time.Now()
	s.tokens = min(float64(o.Burst), s.tokens+now.Sub(s.refill).Seconds()*float64(o.Rate))
	s.refill = now
	if s.tokens < float64(n) {
		s.cut(ReasonRate, fmt.Sprintf("over %d bytes/s (burst %d)", o.Rate, o.Burst))
		return
	}
	s.tokens -= float64(n)
	s.bytes += int64(n)
	if s.bytes > o.MaxBytes {
		s.cut(ReasonBytes, fmt.Sprintf("over %d bytes in one stream", o.MaxBytes))
		return
	}
	var c events.LogsChunk
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || dec.More() {
		s.cut(ReasonDecode, "a chunk that is not one events.LogsChunk")
		return
	}
	if c.Seq != s.seq+1 {
		s.cut(ReasonSequence, fmt.Sprintf("chunk %d after %d", c.Seq, s.seq))
		return
	}
	s.seq = c.Seq
	s.mu.Lock()
	if !c.Sent.IsZero() {
		s.offset = c.Sent.Sub(o.Now())
	}
	s.mu.Unlock()
	select {
	case s.queue <- c:
	default:
		s.fail(fmt.Errorf("%w: %d chunks waiting", ErrReaderBehind, queueChunks))
	}
}

// Next returns the next lines (none for a keep-alive), io.EOF once the
// device said it ended, or the error that ended the stream: ErrNoAnswer,
// ErrDeviceGone, ErrFollowLimit, ErrTooManyStreams (the device answers as
// many as it may), a *CutOffError, a *DeviceError, ErrReaderBehind or
// ctx's error.
func (s *Stream) Next(ctx context.Context) ([]events.LogLine, error) {
	s.mu.Lock()
	ended := s.ended
	s.mu.Unlock()
	if ended {
		return nil, io.EOF
	}
	o := s.rd.o
	wait := 3 * o.KeepAlive
	silence := ErrDeviceGone
	if !s.got {
		wait, silence = o.AnswerTimeout, ErrNoAnswer
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	var follow <-chan time.Time
	if s.r.Follow {
		left := time.Until(s.asked.Add(o.MaxFollow))
		ft := time.NewTimer(max(left, 0))
		defer ft.Stop()
		follow = ft.C
	}
	select {
	case <-s.failed:
		return nil, s.err
	default:
	}
	select {
	case c := <-s.queue:
		first := !s.got
		s.got = true
		if c.Diagnosis != nil {
			s.diagnosis = c.Diagnosis
		}
		if c.End {
			s.mu.Lock()
			s.ended = true
			s.mu.Unlock()
			// The device is done with it: the slot is free.
			s.rd.unregister(s)
			if c.Error != "" {
				msg := PrintableLine(c.Error)
				if len(msg) > maxDeviceError {
					msg = msg[:maxDeviceError] + "…"
				}
				var err error = &DeviceError{Message: msg}
				if rest, ok := strings.CutPrefix(msg, events.LogsTooManyStreams); ok {
					// The device's own limit, of all readers together.
					err = fmt.Errorf("%w on device %s/%s (said by the device%s)", ErrTooManyStreams, s.r.Namespace, s.r.Device, rest)
				}
				if first && len(c.Lines) == 0 {
					// Its answer is a refusal, not a failure while
					// answering: the audit says so.
					if aerr := s.rd.audit(ctx, s.r, s.request, s.diagnose, false, "the device refused it: "+msg, events.RefusedByDevice); aerr != nil {
						err = errors.Join(err, aerr)
					}
				}
				return c.Lines, err
			}
		}
		return c.Lines, nil
	case <-s.failed:
		return nil, s.err
	case <-timer.C:
		if silence == ErrNoAnswer {
			return nil, fmt.Errorf("%w (waited %s for device %s/%s)", ErrNoAnswer, wait, s.r.Namespace, s.r.Device)
		}
		return nil, fmt.Errorf("%w: nothing for %s (device %s/%s)", ErrDeviceGone, wait, s.r.Namespace, s.r.Device)
	case <-follow:
		return nil, fmt.Errorf("%w (%s): run it again to go on", ErrFollowLimit, o.MaxFollow)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close ends the stream: unless the device said it ended, it is asked to
// stop (logs-stop). Safe to call more than once.
func (s *Stream) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ended := s.ended
	s.mu.Unlock()
	s.release()
	if ended {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.rd.command(ctx, s.r.Device, events.CommandLogsStop, s.r.Who.User, &events.LogsRequest{Reader: s.rd.id, Request: s.request,
		Namespace: s.r.Namespace, Deployment: s.r.Deployment, Service: s.r.Service})
}

// release forgets the stream in its Reader.
func (s *Stream) release() {
	s.fail(fmt.Errorf("devicelogs: stream %s closed", s.request))
	s.rd.unregister(s)
}

// Answering logs requests (ADR 0025): a container's log, redacted, in
// bounded chunks on the request's own subject.

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
)

// Bounds of the agent's answers to logs requests (docs/security.md,
// "Device logs").
const (
	// MaxLogStreams is how many logs requests the agent answers at once,
	// of every reader together: it refuses more (events.LogsTooManyStreams).
	MaxLogStreams = 4
	// LogChunkBytes bounds a chunk as encoded (a reader refuses over
	// 64 KiB).
	LogChunkBytes = 60 << 10
	// LogBytesPerSecond bounds one stream's output.
	LogBytesPerSecond = 1 << 20
	// LogKeepAlive is how often a following stream with nothing to send
	// says it is there.
	LogKeepAlive = 5 * time.Second
	// DefaultLogFollow is how long a follow lasts when the request does
	// not say (events.MaxLogsFollow at most).
	DefaultLogFollow = 30 * time.Minute
	// logFlush is how long lines wait to be sent with others.
	logFlush = 100 * time.Millisecond
	// logRefind is how often a follow looks for the service's container
	// again once it stopped (a restart, a new revision).
	logRefind = 500 * time.Millisecond
)

// logStreams are the logs requests being answered, by request id.
type logStreams struct {
	d *daemon
	// ctx ends when the agent stops: every answer ends with it.
	ctx context.Context
	mu  sync.Mutex
	on  map[string]context.CancelFunc
	wg  sync.WaitGroup
}

func newLogStreams(d *daemon, ctx context.Context) *logStreams {
	return &logStreams{d: d, ctx: ctx, on: map[string]context.CancelFunc{}}
}

// start answers lr in its own goroutine; the answer's subject carries
// this device's id and the reader's ids, nothing the command chose beyond
// them.
func (ls *logStreams) start(lr events.LogsRequest) {
	ctx := ls.ctx
	subj, err := events.LogsSubject(ls.d.o.Device, lr.Reader, lr.Request)
	if err != nil {
		ls.d.log.WarnContext(ctx, "a logs command names no valid answer subject: ignored", "error", err)
		return
	}
	w := &chunkWriter{nc: ls.d.o.Conn, subject: subj, now: time.Now}
	if err := lr.Validate(); err != nil {
		w.end(err.Error())
		return
	}
	ls.mu.Lock()
	if _, dup := ls.on[lr.Request]; dup {
		ls.mu.Unlock()
		return
	}
	if len(ls.on) >= MaxLogStreams {
		ls.mu.Unlock()
		w.end(fmt.Sprintf("%s: this device already answers %d logs requests, the most of all readers together: "+
			"stop a follow (fleet logs -f, a dashboard Logs page) or try again when one ends", events.LogsTooManyStreams, MaxLogStreams))
		return
	}
	follow := time.Duration(0)
	if lr.Follow {
		follow = DefaultLogFollow
		if lr.FollowSeconds > 0 {
			follow = time.Duration(lr.FollowSeconds) * time.Second
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	if follow > 0 {
		sctx, cancel = context.WithTimeout(ctx, follow)
	}
	ls.on[lr.Request] = cancel
	ls.mu.Unlock()
	ls.wg.Go(func() {
		defer func() {
			ls.mu.Lock()
			delete(ls.on, lr.Request)
			ls.mu.Unlock()
			cancel()
		}()
		err := ls.d.streamLogs(sctx, lr, w)
		switch {
		case err == nil || errors.Is(err, context.DeadlineExceeded) || (errors.Is(err, context.Canceled) && ctx.Err() == nil):
			w.end("")
		case ctx.Err() != nil:
			// The agent stops: nothing more is sent.
		default:
			w.end(err.Error())
		}
	})
}

// stop ends the answer to request, if any.
func (ls *logStreams) stop(request string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if cancel, ok := ls.on[request]; ok {
		cancel()
	}
}

// errNotHere: the request names a Deployment or service this device does
// not run.
var errNotHere = errors.New("not on this device")

// streamLogs sends the log lr asks for through w: redacted with the
// Deployment's secret values and pull credentials, at most
// LogBytesPerSecond, following the service across restarts and new
// revisions until ctx ends.
func (d *daemon) streamLogs(ctx context.Context, lr events.LogsRequest, w *chunkWriter) error {
	k := depKey{lr.Namespace, lr.Deployment}
	d.mon.mu.Lock()
	spec, ok := d.mon.specs[k]
	d.mon.mu.Unlock()
	if !ok {
		return fmt.Errorf("the Deployment %s is %w", k, errNotHere)
	}
	if lr.Service != spec.Init && !slices.Contains(spec.Services, lr.Service) {
		return fmt.Errorf("the Deployment %s has no service or init container %q (it has %v)", k, lr.Service, spec.Services)
	}
	secrets := append([]string(nil), spec.secrets...)
	if creds := d.o.Reconciler.Credentials; creds != nil {
		for _, ref := range spec.pulls {
			raw, err := creds.PullCredential(ctx, ref)
			if err != nil {
				return fmt.Errorf("the pull secret of Deployment %s could not be read to redact it: %w", k, err)
			}
			c, err := ParsePullCredential(raw)
			if err != nil {
				return fmt.Errorf("the pull secret of Deployment %s could not be read to redact it: %w", k, err)
			}
			secrets = append(secrets, c.Password)
		}
	}
	streamer, ok := d.o.Reconciler.Runtime.(runtime.LogStreamer)
	if !ok {
		return errors.New("this agent's container engine cannot stream logs")
	}
	o := runtime.LogOptions{Tail: lr.Tail, Since: lr.Since, Follow: lr.Follow}
	// Lines wait at most logFlush; a follow with nothing to send says it
	// is there every LogKeepAlive, while the engine's stream blocks too.
	fctx, stopFlush := context.WithCancel(ctx)
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		w.flusher(fctx, lr.Follow)
	}()
	defer func() { stopFlush(); <-flushed }()
	// last is the time of the last line sent, atLast how many lines of
	// that time were sent: a resume asks from last and skips them (Podman
	// 4.3's times are whole seconds, so a resume from just after last
	// would lose the rest of that second).
	var last time.Time
	atLast := 0
	lastID := ""
	for {
		id, err := d.logContainer(ctx, k, lr.Service)
		if err != nil {
			return err
		}
		if id != "" && (id != lastID || lr.Follow) {
			if id != lastID && lastID != "" {
				// A new container (a new revision, a re-creation): its
				// whole log is new.
				o.Since, o.Tail, last, atLast = time.Time{}, 0, time.Time{}, 0
			}
			lastID = id
			skipAt, skip := last, atLast
			if o.Since.IsZero() {
				skip = 0
			}
			err := streamer.StreamLogs(ctx, id, o, func(e runtime.LogEntry) error {
				if skip > 0 && e.Time.Equal(skipAt) {
					skip--
					return nil
				}
				skip = 0
				switch {
				case e.Time.IsZero():
				case e.Time.Equal(last):
					atLast++
				default:
					last, atLast = e.Time, 1
				}
				text, ok := redactText(e.Text, secrets)
				if !ok {
					text = withheldOutput
				}
				return w.line(ctx, events.LogLine{Time: e.Time, Text: text})
			})
			if err != nil && ctx.Err() == nil && !errors.Is(err, runtime.ErrNotFound) {
				return err
			}
			if !last.IsZero() {
				// Go on after the last line sent (a restart of the same
				// container keeps its log).
				o.Since, o.Tail = last, 0
			}
		} else if id == "" && !lr.Follow {
			return fmt.Errorf("the Deployment %s has no container of %q on this device now", k, lr.Service)
		}
		if err := w.flush(); err != nil {
			return err
		}
		if !lr.Follow {
			return nil
		}
		// Following: wait for the container to run again (the flusher
		// says the device is still there).
		wait := time.NewTimer(logRefind)
		select {
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		case <-wait.C:
		}
	}
}

// logContainer is the ID of service's container of Deployment k now ("":
// none).
func (d *daemon) logContainer(ctx context.Context, k depKey, service string) (string, error) {
	_, mine, err := d.o.Reconciler.containers(ctx, k.ns, k.name)
	if err != nil {
		return "", err
	}
	if c, ok := mine[service]; ok {
		return c.ID, nil
	}
	return "", nil
}

// chunkWriter batches lines into LogsChunks of at most LogChunkBytes and
// publishes them at most LogBytesPerSecond.
type chunkWriter struct {
	nc      *nats.Conn
	subject string
	now     func() time.Time

	mu      sync.Mutex
	seq     uint64
	pending []events.LogLine
	size    int
	since   time.Time // first pending line
	sentAt  time.Time // when the pacing budget was last refilled
	budget  float64
	// lastSend is when the last chunk went (keep-alives).
	lastSend time.Time
	ended    bool
}

// lineOverhead is what a line adds to a chunk besides its text.
const lineOverhead = 64

// line queues one line, sending when the chunk is full or has waited.
func (w *chunkWriter) line(ctx context.Context, l events.LogLine) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(l.Text)*6/5 + lineOverhead // JSON escaping
	if w.size+n > LogChunkBytes && len(w.pending) > 0 {
		if err := w.sendLocked(ctx, false, ""); err != nil {
			return err
		}
	}
	if len(w.pending) == 0 {
		w.since = w.now()
	}
	w.pending = append(w.pending, l)
	w.size += n
	if w.now().Sub(w.since) >= logFlush {
		return w.sendLocked(ctx, false, "")
	}
	return nil
}

// flush sends the pending lines.
func (w *chunkWriter) flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pending) == 0 {
		return nil
	}
	return w.sendLocked(context.Background(), false, "")
}

// flusher sends the pending lines every logFlush and, when follow is
// set, a chunk without lines when nothing was sent for LogKeepAlive, until
// ctx ends.
func (w *chunkWriter) flusher(ctx context.Context, follow bool) {
	tick := time.NewTicker(logFlush)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.mu.Lock()
		switch {
		case len(w.pending) > 0:
			_ = w.sendLocked(ctx, false, "")
		case follow && w.now().Sub(w.lastSend) >= LogKeepAlive:
			_ = w.sendLocked(ctx, false, "")
		}
		w.mu.Unlock()
	}
}

// end sends the last chunk, with the error text when not "".
func (w *chunkWriter) end(errText string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return
	}
	_ = w.sendLocked(context.Background(), true, errText)
	w.ended = true
}

// sendLocked publishes the pending lines as the next chunk, pacing to
// LogBytesPerSecond. The caller holds w.mu.
func (w *chunkWriter) sendLocked(ctx context.Context, end bool, errText string) error {
	if w.ended {
		return nil
	}
	if len(errText) > 1024 {
		errText = errText[:1024]
	}
	w.seq++
	c := events.LogsChunk{Seq: w.seq, Sent: w.now().UTC(), Lines: w.pending, End: end, Error: errText}
	b, err := json.Marshal(c)
	for err == nil && len(b) > LogChunkBytes && len(c.Lines) > 0 {
		// Escaping made it larger than estimated: cut the last line.
		last := &c.Lines[len(c.Lines)-1]
		last.Text = last.Text[:len(last.Text)/2]
		b, err = json.Marshal(c)
	}
	if err != nil {
		return fmt.Errorf("encode a log chunk: %w", err)
	}
	w.pending, w.size = nil, 0
	// Pace: a budget of LogBytesPerSecond, refilled with time.
	now := w.now()
	if w.sentAt.IsZero() {
		w.budget = LogBytesPerSecond
	} else {
		w.budget = min(LogBytesPerSecond, w.budget+now.Sub(w.sentAt).Seconds()*LogBytesPerSecond)
	}
	w.sentAt = now
	if w.budget < float64(len(b)) {
		wait := time.Duration((float64(len(b)) - w.budget) / LogBytesPerSecond * float64(time.Second))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		w.budget += wait.Seconds() * LogBytesPerSecond
		w.sentAt = w.now()
	}
	w.budget -= float64(len(b))
	w.lastSend = w.now()
	if err := w.nc.Publish(w.subject, b); err != nil {
		return fmt.Errorf("send a log chunk: %w", err)
	}
	return nil
}

package podman

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/domain/entities/types"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// eventKinds maps the Podman event statuses Watch asks for to their kinds.
var eventKinds = map[string]runtime.EventKind{
	"died":          runtime.EventDied,
	"start":         runtime.EventStart,
	"health_status": runtime.EventHealth,
	"remove":        runtime.EventRemoved,
}

// Watch streams container events from Podman's /events endpoint (the
// bindings' system.Events), filtered by the engine on type=container, the
// four statuses of eventKinds and each label, and again here: Podman ORs
// filters of the same key, so a container carrying one of the labels only
// is dropped on this side. The stream starts at the call's time (since),
// so an event between the call and the engine's subscription is not lost;
// with the file events backend the engine reads its log from the start to
// find them. Podman 4.3 puts the health status from before the check into
// a health_status event (see runtime.EventHealth). A stream that ends
// while ctx has not (Podman restarted) closes the channel after an
// EventLost.
func (r *Runtime) Watch(ctx context.Context, labels map[string]string) (<-chan runtime.ContainerEvent, error) {
	filters := map[string][]string{
		"type":  {"container"},
		"event": slices.Sorted(maps.Keys(eventKinds)),
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		filters["label"] = append(filters["label"], k+"="+labels[k])
	}
	since := time.Now().Format(time.RFC3339Nano)
	opts := new(system.EventsOptions).WithFilters(filters).WithStream(true).WithSince(since)
	raw := make(chan types.Event, runtime.WatchBuffer)
	if err := system.Events(r.call(ctx), raw, nil, opts); err != nil {
		return nil, redact(fmt.Errorf("podman: watch container events: %w", err), nil)
	}
	want := maps.Clone(labels)
	out := make(chan runtime.ContainerEvent, runtime.WatchBuffer)
	go func() {
		defer close(out)
		forward(raw, want, out) // the bindings close raw when the stream ends
		if ctx.Err() == nil {
			runtime.Deliver(out, runtime.ContainerEvent{Kind: runtime.EventLost, Time: time.Now()})
		}
	}()
	return out, nil
}

// forward delivers the events of raw that Watch delivers (containerEvent)
// to out until raw is closed, each once: Podman 4.3's file events backend
// rotates its log (at events_logfile_max_size, 1 MB by default) by
// writing the newer half to a new file, and a streaming reader reopens it
// from the start, so every event of that half newer than the watch's
// start comes again (later Podman marks the copy and skips it). A death
// delivered twice would count as two.
func forward(raw <-chan types.Event, want map[string]string, out chan runtime.ContainerEvent) {
	seen := newSeenEvents(maxSeenEvents)
	for e := range raw {
		ev, ok := containerEvent(e, want)
		if !ok || seen.again(e) {
			continue
		}
		runtime.Deliver(out, ev)
	}
}

// maxSeenEvents bounds the events a watch remembers to drop their copies:
// more than the containers' events of half a rotated log (a few thousand
// events of every container on the machine).
const maxSeenEvents = 4096

// seenEvents is the keys of the last events a watch delivered, oldest
// forgotten first.
type seenEvents struct {
	keys  map[eventKey]struct{}
	order []eventKey
	max   int
}

// eventKey identifies one event in Podman's log: its container, status
// and time to the nanosecond.
type eventKey struct {
	id, action string
	nano       int64
}

func newSeenEvents(limit int) *seenEvents {
	return &seenEvents{keys: make(map[eventKey]struct{}, limit), max: limit}
}

// again reports whether e was seen before, and remembers it. An event
// without a nanosecond time is never taken for a copy: two events of one
// second would be told apart by nothing.
func (s *seenEvents) again(e types.Event) bool {
	if e.TimeNano == 0 {
		return false
	}
	k := eventKey{id: e.Actor.ID, action: string(e.Action), nano: e.TimeNano}
	if _, ok := s.keys[k]; ok {
		return true
	}
	if len(s.order) == s.max {
		delete(s.keys, s.order[0])
		s.order = s.order[1:]
	}
	s.keys[k] = struct{}{}
	s.order = append(s.order, k)
	return false
}

// containerEvent maps one Podman event; false for an event Watch does not
// deliver (another type or status, or a container without every label).
func containerEvent(e types.Event, labels map[string]string) (runtime.ContainerEvent, bool) {
	kind, ok := eventKinds[string(e.Action)]
	if !ok || e.Type != "container" || e.Actor.ID == "" {
		return runtime.ContainerEvent{}, false
	}
	attrs := e.Actor.Attributes
	for k, v := range labels {
		if got, ok := attrs[k]; !ok || got != v {
			return runtime.ContainerEvent{}, false
		}
	}
	out := runtime.ContainerEvent{ID: e.Actor.ID, Name: attrs["name"], Kind: kind}
	if e.TimeNano != 0 {
		out.Time = time.Unix(0, e.TimeNano)
	} else if e.Time != 0 {
		out.Time = time.Unix(e.Time, 0)
	}
	switch kind {
	case runtime.EventDied:
		// A died event without a readable code is still a death; Inspect
		// has the code.
		out.ExitCode, _ = strconv.Atoi(attrs["containerExitCode"])
	case runtime.EventHealth:
		out.Health = e.HealthStatus
	}
	return out, true
}

// Logs returns the last tail lines of the container's log (stdout and
// stderr as Podman interleaved them in its log file), read with the
// bindings' containers.Logs and Tail; each line is cut at
// runtime.MaxLogLine bytes. runtime.ErrNotFound when the container does
// not exist.
func (r *Runtime) Logs(ctx context.Context, id string, tail int) ([]string, error) {
	opts := new(containers.LogOptions).WithStdout(true).WithStderr(true).WithFollow(false)
	if tail > 0 {
		opts = opts.WithTail(strconv.Itoa(tail))
	}
	// One channel for both streams keeps their order; a frame is one
	// entry of the log (a line, or part of a long one).
	frames := make(chan string, 16)
	lines := make(chan []string, 1)
	go func() {
		var b logLines
		for f := range frames {
			b.add(f)
		}
		lines <- b.done()
	}()
	err := containers.Logs(r.call(ctx), id, opts, frames, frames)
	close(frames)
	out := <-lines
	if err != nil {
		return nil, r.containerError("read the logs of", id, err)
	}
	if tail > 0 && len(out) > tail {
		out = out[len(out)-tail:]
	}
	return out, nil
}

// logLines splits log frames into lines of at most runtime.MaxLogLine
// bytes: a frame without a line end continues on the next one.
type logLines struct {
	lines []string
	cur   strings.Builder
	open  bool // cur holds a line not yet ended
}

func (b *logLines) add(frame string) {
	for frame != "" {
		part, rest, ended := strings.Cut(frame, "\n")
		if room := runtime.MaxLogLine - b.cur.Len(); room > 0 {
			b.cur.WriteString(part[:min(len(part), room)])
		}
		b.open = true
		if ended {
			b.end()
		}
		frame = rest
	}
}

func (b *logLines) end() {
	b.lines = append(b.lines, strings.ToValidUTF8(b.cur.String(), "\uFFFD"))
	b.cur.Reset()
	b.open = false
}

func (b *logLines) done() []string {
	if b.open {
		b.end()
	}
	return b.lines
}

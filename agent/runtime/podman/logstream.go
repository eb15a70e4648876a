package podman

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/system"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// StreamLogs implements runtime.LogStreamer with the bindings'
// containers.Logs, timestamps on: each line's time is the engine's.
func (r *Runtime) StreamLogs(ctx context.Context, id string, o runtime.LogOptions, each func(runtime.LogEntry) error) error {
	opts := new(containers.LogOptions).WithStdout(true).WithStderr(true).WithFollow(o.Follow).WithTimestamps(true)
	if o.Tail > 0 {
		opts = opts.WithTail(strconv.Itoa(o.Tail))
	}
	if !o.Since.IsZero() {
		opts = opts.WithSince(o.Since.UTC().Format(time.RFC3339Nano))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	frames := make(chan string, 64)
	done := make(chan error, 1)
	go func() {
		err := containers.Logs(r.call(ctx), id, opts, frames, frames)
		close(frames)
		done <- err
	}()
	var b stampedLines
	var cbErr error
	emit := func(e runtime.LogEntry) {
		if cbErr == nil {
			if cbErr = each(e); cbErr != nil {
				cancel()
			}
		}
	}
	for f := range frames {
		b.add(f, emit)
	}
	b.flush(emit)
	err := <-done
	switch {
	case cbErr != nil:
		return cbErr
	case err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled):
		return nil
	case err != nil:
		if ctx.Err() != nil {
			return nil
		}
		return r.containerError("read the logs of", id, err)
	}
	return nil
}

// stampedLines splits timestamped log frames into entries: each frame
// starts with the engine's RFC 3339 time and a space; a frame without a
// line end (a part of a long line) continues on the next one, whose time
// is dropped; a line is cut at runtime.MaxLogLine bytes.
type stampedLines struct {
	cur  strings.Builder
	at   time.Time
	open bool
}

func (b *stampedLines) add(frame string, emit func(runtime.LogEntry)) {
	first := true
	for frame != "" {
		part, rest, ended := strings.Cut(frame, "\n")
		// Every frame starts with its time, a part of a long line too.
		if first || !b.open {
			if ts, text, ok := strings.Cut(part, " "); ok {
				if t, err := time.Parse(time.RFC3339Nano, ts); err == nil {
					part = text
					if !b.open {
						b.at = t
					}
				}
			}
			b.open = true
		}
		first = false
		if room := runtime.MaxLogLine - b.cur.Len(); room > 0 {
			b.cur.WriteString(part[:min(len(part), room)])
		}
		if ended {
			b.end(emit)
		}
		frame = rest
	}
}

func (b *stampedLines) end(emit func(runtime.LogEntry)) {
	emit(runtime.LogEntry{Time: b.at, Text: strings.ToValidUTF8(b.cur.String(), "\uFFFD")})
	b.cur.Reset()
	b.at = time.Time{}
	b.open = false
}

func (b *stampedLines) flush(emit func(runtime.LogEntry)) {
	if b.open {
		b.end(emit)
	}
}

// EngineVersion implements runtime.Versioner: the Podman service's
// version.
func (r *Runtime) EngineVersion(ctx context.Context) (string, error) {
	v, err := system.Version(r.call(ctx), nil)
	if err != nil {
		return "", r.containerError("ask the version of", "podman", err)
	}
	if v == nil || v.Server == nil {
		return "podman", nil
	}
	return "podman " + v.Server.Version, nil
}

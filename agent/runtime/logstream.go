package runtime

import (
	"context"
	"time"
)

// LogOptions select what StreamLogs sends.
type LogOptions struct {
	// Tail is how many of the last lines first (<= 0: every line).
	Tail int
	// Since, when set, sends only lines recorded at or after it.
	Since time.Time
	// Follow goes on with new lines until ctx ends or the container
	// stops.
	Follow bool
}

// LogEntry is one line of a container's log.
type LogEntry struct {
	// Time is when the engine recorded it (zero when it does not say).
	Time time.Time
	// Text is the line without its end, valid UTF-8, at most MaxLogLine
	// bytes: what the container printed, untrusted, possibly secret.
	Text string
}

// LogStreamer is a Runtime that streams a container's log with
// timestamps (ADR 0025). Both engines implement it.
type LogStreamer interface {
	// StreamLogs calls each for every line of container id's log that o
	// selects, stdout and stderr interleaved as printed, oldest first.
	// With o.Follow it returns when ctx ends (nil) or the container
	// stops (nil); without, once the lines recorded so far are sent. An
	// error each returns ends it with that error. ErrNotFound when the
	// container does not exist.
	StreamLogs(ctx context.Context, id string, o LogOptions, each func(LogEntry) error) error
}

// Versioner is a Runtime that names its engine and version for a
// diagnosis ("podman 4.3.1").
type Versioner interface {
	EngineVersion(ctx context.Context) (string, error)
}

package sim

import (
	"context"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// followPoll is how often a following StreamLogs looks for new lines.
const followPoll = 50 * time.Millisecond

// StreamLogs implements runtime.LogStreamer: the kept lines o selects
// (their time is Options.Now's when printed, zero without it), then,
// with o.Follow, every line printed until ctx ends or the container
// stops.
func (r *Runtime) StreamLogs(ctx context.Context, id string, o runtime.LogOptions, each func(runtime.LogEntry) error) error {
	if err := r.down("logs"); err != nil {
		return err
	}
	r.mu.Lock()
	c, err := r.lookup(id)
	if err != nil {
		r.mu.Unlock()
		return err
	}
	var first []runtime.LogEntry
	for i, l := range c.logs {
		if o.Since.IsZero() || !c.logAt[i].Before(o.Since) {
			first = append(first, runtime.LogEntry{Time: c.logAt[i], Text: l})
		}
	}
	seen := c.printed
	r.mu.Unlock()
	if o.Tail > 0 && len(first) > o.Tail {
		first = first[len(first)-o.Tail:]
	}
	for _, e := range first {
		if err := each(e); err != nil {
			return err
		}
	}
	if !o.Follow {
		return nil
	}
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		r.mu.Lock()
		c, err := r.lookup(id)
		if err != nil {
			r.mu.Unlock()
			return nil // removed: the container stopped
		}
		var next []runtime.LogEntry
		if n := min(c.printed-seen, len(c.logs)); n > 0 {
			for i := len(c.logs) - n; i < len(c.logs); i++ {
				next = append(next, runtime.LogEntry{Time: c.logAt[i], Text: c.logs[i]})
			}
		}
		seen = c.printed
		running := c.state == runtime.StateRunning
		r.mu.Unlock()
		for _, e := range next {
			if err := each(e); err != nil {
				return err
			}
		}
		if !running {
			return nil
		}
	}
}

// EngineVersion implements runtime.Versioner.
func (r *Runtime) EngineVersion(context.Context) (string, error) { return "sim", nil }

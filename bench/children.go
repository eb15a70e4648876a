package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// children starts the child processes of one phase for devices 1..n.
func (b *bench) children(mode string, n int, window time.Duration, env ...string) ([]*child, error) {
	per := b.o.PerProcess
	count := (n + per - 1) / per
	var out []*child
	for c := range count {
		from, to := c*n/count+1, (c+1)*n/count
		f := childFlags{url: b.cp.servers.urlFor(c), from: from, to: to, window: window}
		if mode == modeAgents || mode == modeFlood {
			f.keys = b.keys
		}
		ch, err := startChild(b.o, mode, f, env...)
		if err != nil {
			stopChildren(out)
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// stopChildren stops every child (once; later calls do nothing).
func stopChildren(cs []*child) error {
	var errs []error
	for _, c := range cs {
		if c.stopped {
			continue
		}
		c.stopped = true
		if err := c.stop(time.Minute); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// awaitReady waits for every child's ready line and returns the sorted
// connect latencies (µs), the retries and the children's summed RSS.
func awaitReady(ctx context.Context, cs []*child, timeout time.Duration) ([]int64, int, uint64, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var lat []int64
	retries := 0
	var rss uint64
	for _, c := range cs {
		for ready := false; !ready; {
			select {
			case m, ok := <-c.msgs:
				switch {
				case !ok:
					return nil, 0, 0, fmt.Errorf("%w: pid %d exited before all its devices connected", ErrChild, c.cmd.Process.Pid)
				case m.Kind == "error":
					return nil, 0, 0, fmt.Errorf("%w: %s", ErrChild, m.Error)
				case m.Kind == "ready":
					lat = append(lat, m.Latencies...)
					retries += m.Retries
					rss += m.RSS
					ready = true
				}
			case <-deadline.C:
				return nil, 0, 0, fmt.Errorf("%w: devices not connected after %s", ErrIncomplete, timeout)
			case <-ctx.Done():
				return nil, 0, 0, ctx.Err()
			}
		}
	}
	slices.Sort(lat)
	return lat, retries, rss, nil
}

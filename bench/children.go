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

// readiness is what the children's ready lines say together.
type readiness struct {
	// Latencies are the sorted connect latencies, µs.
	Latencies []int64
	Retries   int
	// RSS, Heap and Stacks are the children's resident memory, Go heap in
	// use and goroutine stacks, summed; Goroutines their goroutines.
	RSS, Heap, Stacks uint64
	Goroutines        int
}

// awaitReady waits for every child's ready line and returns what they
// said together.
func awaitReady(ctx context.Context, cs []*child, timeout time.Duration) (readiness, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var r readiness
	for _, c := range cs {
		for ready := false; !ready; {
			select {
			case m, ok := <-c.msgs:
				switch {
				case !ok:
					return readiness{}, fmt.Errorf("%w: pid %d exited before all its devices connected", ErrChild, c.cmd.Process.Pid)
				case m.Kind == "error":
					return readiness{}, fmt.Errorf("%w: %s", ErrChild, m.Error)
				case m.Kind == "ready":
					r.Latencies = append(r.Latencies, m.Latencies...)
					r.Retries += m.Retries
					r.RSS += m.RSS
					r.Heap += m.Heap
					r.Stacks += m.Stacks
					r.Goroutines += m.Goroutines
					ready = true
				}
			case <-deadline.C:
				return readiness{}, fmt.Errorf("%w: devices not connected after %s", ErrIncomplete, timeout)
			case <-ctx.Done():
				return readiness{}, ctx.Err()
			}
		}
	}
	slices.Sort(r.Latencies)
	return r, nil
}

package bench

import (
	"context"
	"fmt"
	"time"
)

// await waits until c reached its target.
func await(ctx context.Context, c *counter, timeout time.Duration, what string) error {
	t := time.NewTimer(max(timeout, time.Second))
	defer t.Stop()
	select {
	case <-c.done:
		return nil
	case <-t.C:
		got, _ := c.state()
		return fmt.Errorf("%w: %s: %d of %d after %s", ErrIncomplete, what, got, c.target, timeout.Round(time.Second))
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// awaitClients polls until the server is back to base client connections.
func awaitClients(ctx context.Context, cp *controlPlane, base int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		n, err := cp.servers.clients(ctx)
		if err != nil {
			return err
		}
		if n <= base {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d client connections left after the children stopped (want %d)", ErrIncomplete, n, base)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

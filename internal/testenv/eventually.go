package testenv

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Poll back-off: the first re-check comes after pollMin, each later wait is
// half as long again as the one before, up to pollMax.
const (
	pollMin = 5 * time.Millisecond
	pollMax = 100 * time.Millisecond
)

// ErrTimeout is wrapped by the error Poll returns when cond did not hold
// within the timeout.
var ErrTimeout = errors.New("timed out")

// Poll calls cond until it returns true, ctx ends, or timeout passes. It
// waits a short, growing back-off (5 ms up to 100 ms) between calls, the
// last wait ending at the deadline, where cond is called once more, so a
// condition that holds at the deadline counts. It returns nil once cond
// held, ctx.Err() if ctx ended first, and an error wrapping ErrTimeout that
// names the timeout otherwise.
//
// Poll does not touch a testing.TB, so it is safe to call from a goroutine
// other than the test's, and lets a test that fails with a message holding
// the state it saw at the deadline build that message itself.
func Poll(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	wait := pollMin
	for {
		if cond() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%w after %s", ErrTimeout, timeout)
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait+wait/2, pollMax)
	}
}

// PollErr is Poll for a check that says why it does not hold yet: it calls
// check until it returns nil, ctx ends, or timeout passes, with Poll's
// back-off and its last call at the deadline. It returns nil once check
// returned nil; otherwise the error Poll would return (wrapping ErrTimeout
// or ctx.Err()) joined with the last error check returned, so that
// errors.Is matches both and the message says what was last seen:
// "timed out after 10s; last: <check's error>".
//
// Like Poll it does not touch a testing.TB: a test that wants to add more
// to the failure (a process's log, say) calls it and builds its own
// message.
func PollErr(ctx context.Context, timeout time.Duration, check func() error) error {
	var last error
	err := Poll(ctx, timeout, func() bool {
		last = check()
		return last == nil
	})
	if err == nil {
		return nil
	}
	// Poll calls check before it looks at ctx or the clock, so last is
	// the error of a call that was made.
	return fmt.Errorf("%w; last: %w", err, last)
}

// EventuallyErr calls check (see Poll for the back-off) until it returns
// nil and fails tb with "timed out after <timeout> waiting for <what>:
// <check's last error>" if it does not within timeout: the failure says
// what the test saw last, not only that it waited. Call it from the test's
// goroutine only (it calls tb.Fatalf; check may too); from other goroutines
// use PollErr.
func EventuallyErr(tb testing.TB, what string, timeout time.Duration, check func() error) {
	tb.Helper()
	var last error
	if err := Poll(context.Background(), timeout, func() bool {
		last = check()
		return last == nil
	}); err != nil {
		tb.Fatalf("timed out after %s waiting for %s: %v", timeout, what, last)
	}
}

// Eventually calls cond (see Poll for the back-off) until it returns true and
// fails tb with "timed out after <timeout> waiting for <what>" if it does not
// within timeout. Call it from the test's goroutine only (it calls
// tb.Fatalf); from other goroutines use Poll. A condition that can say
// why it does not hold yet is better written for EventuallyErr, whose
// failure carries the last state seen.
func Eventually(tb testing.TB, what string, timeout time.Duration, cond func() bool) {
	tb.Helper()
	if err := Poll(context.Background(), timeout, cond); err != nil {
		tb.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

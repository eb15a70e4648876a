package testenv

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// fakeTB records Fatalf instead of failing the real test; like the real one
// it ends the calling goroutine.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// runFake runs fn with a fake TB on its own goroutine (Fatalf ends it) and
// returns what Fatalf was given, "" if it was not called.
func runFake(fn func(tb testing.TB)) string {
	f := &fakeTB{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	return f.msg
}

func TestEventuallySucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		calls := 0
		msg := runFake(func(tb testing.TB) {
			Eventually(tb, "the third call", time.Second, func() bool {
				calls++
				return calls == 3
			})
		})
		if msg != "" {
			t.Fatalf("Eventually failed: %s", msg)
		}
		if calls != 3 {
			t.Fatalf("cond called %d times, want 3", calls)
		}
		// Back-off: 5 ms, then 7.5 ms.
		if got, want := time.Since(start), 12500*time.Microsecond; got != want {
			t.Fatalf("took %s, want %s", got, want)
		}
	})
}

func TestEventuallyFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var last time.Time
		msg := runFake(func(tb testing.TB) {
			Eventually(tb, "never", 2*time.Second, func() bool {
				last = time.Now()
				return false
			})
		})
		if want := "timed out after 2s waiting for never"; msg != want {
			t.Fatalf("message %q, want %q", msg, want)
		}
		if got := last.Sub(start); got != 2*time.Second {
			t.Fatalf("last check at %s, want at the 2s deadline", got)
		}
	})
}

func TestPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		err := Poll(context.Background(), time.Second, func() bool { return false })
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "after 1s") {
			t.Fatalf("Poll: %v, want a timeout after 1s", err)
		}

		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		err = Poll(ctx, time.Minute, func() bool { return false })
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Poll with an ending context: %v, want %v", err, context.DeadlineExceeded)
		}
		if got := time.Since(start); got != 300*time.Millisecond {
			t.Fatalf("Poll returned after %s, want when the context ended (300ms)", got)
		}

		if err := Poll(context.Background(), 0, func() bool { return true }); err != nil {
			t.Fatalf("Poll with a holding condition: %v", err)
		}
	})
}

func TestEventuallyErrSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		msg := runFake(func(tb testing.TB) {
			EventuallyErr(tb, "the third call", time.Second, func() error {
				calls++
				if calls < 3 {
					return fmt.Errorf("call %d", calls)
				}
				return nil
			})
		})
		if msg != "" {
			t.Fatalf("EventuallyErr failed: %s", msg)
		}
		if calls != 3 {
			t.Fatalf("check called %d times, want 3", calls)
		}
	})
}

func TestEventuallyErrFailsWithTheLastError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var last time.Time
		calls := 0
		msg := runFake(func(tb testing.TB) {
			EventuallyErr(tb, "never", 2*time.Second, func() error {
				last = time.Now()
				calls++
				return fmt.Errorf("state %d", calls)
			})
		})
		if want := fmt.Sprintf("timed out after 2s waiting for never: state %d", calls); msg != want {
			t.Fatalf("message %q, want %q", msg, want)
		}
		if got := last.Sub(start); got != 2*time.Second {
			t.Fatalf("last check at %s, want at the 2s deadline", got)
		}
	})
}

func TestPollErr(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errState := errors.New("not yet")
		err := PollErr(context.Background(), time.Second, func() error { return errState })
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, errState) {
			t.Fatalf("PollErr: %v, want a timeout wrapping the last error", err)
		}
		if want := "timed out after 1s; last: not yet"; err.Error() != want {
			t.Fatalf("PollErr: %q, want %q", err, want)
		}

		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		err = PollErr(ctx, time.Minute, func() error { return errState })
		if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errState) {
			t.Fatalf("PollErr with an ending context: %v, want %v wrapping the last error", err, context.DeadlineExceeded)
		}

		calls := 0
		if err := PollErr(context.Background(), time.Second, func() error {
			calls++
			if calls < 2 {
				return errState
			}
			return nil
		}); err != nil || calls != 2 {
			t.Fatalf("PollErr with a check that holds on the second call: %v after %d calls", err, calls)
		}
	})
}

package events_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// suppressedHandler records, per warning line, its skipped_since_last_line
// attribute.
type suppressedHandler struct{ lines *[]int64 }

func (h suppressedHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h suppressedHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h suppressedHandler) WithGroup(string) slog.Handler            { return h }
func (h suppressedHandler) Handle(_ context.Context, r slog.Record) error {
	n := int64(-1)
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "skipped_since_last_line" {
			n = a.Value.Int64()
			return false
		}
		return true
	})
	*h.lines = append(*h.lines, n)
	return nil
}

// TestSkipLogWindowOpensAgainAfterTheInterval runs in a synctest bubble, so
// the SkipLogInterval windows pass on the fake clock without waiting: a
// record just inside the window is suppressed, one at the interval gets a
// line that says how many were suppressed since the last, and the window
// then starts again from that line.
func TestSkipLogWindowOpensAgainAfterTheInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := events.NewSkipCounter()
		var lines []int64
		log := slog.New(suppressedHandler{&lines})
		skip := func() {
			c.Skip(t.Context(), log, &events.RecordError{Stream: events.StreamReports, Subject: "fleet.report.a.workload",
				Reason: events.ReasonNotAnEnvelope, Err: errors.New("not an envelope")})
		}
		skip() // line 1: the first of its stream and reason
		for range 3 {
			time.Sleep(events.SkipLogInterval/4 - time.Nanosecond)
			skip() // suppressed: still inside the window
		}
		// Exactly the interval since line 1: line 2, after 3 suppressed.
		time.Sleep(events.SkipLogInterval - 3*(events.SkipLogInterval/4-time.Nanosecond))
		skip()
		time.Sleep(events.SkipLogInterval - time.Nanosecond)
		skip() // suppressed: the window restarted at line 2
		time.Sleep(time.Nanosecond)
		skip() // line 3, after 1 suppressed

		if want := []int64{0, 3, 1}; !slices.Equal(lines, want) {
			t.Errorf("warning lines with skipped_since_last_line %v, want %v", lines, want)
		}
		if got := c.Skipped(events.StreamReports, events.ReasonNotAnEnvelope); got != 7 {
			t.Errorf("counted %d, want 7 (every record, logged or not)", got)
		}
	})
}

package history_test

import (
	"context"
	"errors"
	"iter"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
)

// errGone is a read whose server went away.
var errGone = errors.New("nats: server is disconnected")

// failingReader fails every read, and counts them.
type failingReader struct{ reads int }

func (f *failingReader) fail() iter.Seq2[events.Record, error] {
	f.reads++
	return func(yield func(events.Record, error) bool) { yield(events.Record{}, errGone) }
}

func (f *failingReader) ReplaySubjects(context.Context, []string, events.Start) iter.Seq2[events.Record, error] {
	return f.fail()
}

func (f *failingReader) FollowSubjects(context.Context, []string, events.Start) iter.Seq2[events.Record, error] {
	return f.fail()
}

// TestAReadThatFailsEndsTheAnswerWithItsError: history answers a question
// once, so a failed read is not read again: the answer is the error, naming
// the filter, and the reads after it are not made.
func TestAReadThatFailsEndsTheAnswerWithItsError(t *testing.T) {
	r := &failingReader{}
	h, err := history.New(history.Options{Reader: r})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := h.Device(context.Background(), "rpi-1")
	if !errors.Is(err, errGone) || !strings.Contains(err.Error(), "history: read fleet.") {
		t.Fatalf("Device answered %v, %v; want the read's error naming its filter", tl, err)
	}
	if r.reads != 1 {
		t.Errorf("%d reads made; want 1: the reads after a failed one are not made", r.reads)
	}
}

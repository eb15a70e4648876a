package runtime_test

import (
	"slices"
	"testing"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// drain drains ch without blocking and returns the kinds and IDs read.
func drain(ch chan runtime.ContainerEvent) []runtime.ContainerEvent {
	var out []runtime.ContainerEvent
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestDeliverDropsTheOldestAndSaysSoWhenTheReaderFallsBehind(t *testing.T) {
	died := func(id string) runtime.ContainerEvent { return runtime.ContainerEvent{ID: id, Kind: runtime.EventDied} }
	tests := []struct {
		name string
		cap  int
		sent []string
		// want: the IDs read in order, "lost" for an EventLost.
		want []string
	}{
		{"events that fit are delivered in order", 4, []string{"a", "b", "c"}, []string{"a", "b", "c"}},
		{"a full buffer is delivered as it is", 3, []string{"a", "b", "c"}, []string{"a", "b", "c"}},
		{"one more drops the two oldest for a lost event and the new one", 3, []string{"a", "b", "c", "d"}, []string{"c", "lost", "d"}},
		{"the newest event is always delivered", 3, []string{"a", "b", "c", "d", "e", "f"}, []string{"e", "lost", "f"}},
		{"a buffer of two keeps the lost event and the newest", 2, []string{"a", "b", "c"}, []string{"lost", "c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := make(chan runtime.ContainerEvent, tt.cap)
			for _, id := range tt.sent {
				runtime.Deliver(ch, died(id))
			}
			var got []string
			for _, e := range drain(ch) {
				if e.Kind == runtime.EventLost {
					got = append(got, "lost")
					continue
				}
				got = append(got, e.ID)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("read %v, want %v", got, tt.want)
			}
		})
	}
}

func TestEveryEventKindHasAName(t *testing.T) {
	for _, k := range []runtime.EventKind{runtime.EventDied, runtime.EventStart, runtime.EventHealth, runtime.EventRemoved, runtime.EventLost} {
		if k == "" {
			t.Errorf("an event kind is empty")
		}
	}
}

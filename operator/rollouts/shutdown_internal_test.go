package rollouts

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// TestARunnerStoppedWhileItStartsReturnsNil: a stop is not an error,
// whenever it comes. A runner whose context ends before or while it opens
// its watch of fleet-intent and its reads returns nil, not "watch
// fleet-intent: context canceled" (which made every test that stopped a
// runner soon after starting it fail now and then).
func TestARunnerStoppedWhileItStartsReturnsNil(t *testing.T) {
	_, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(t.Context(), events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// stop is how long after Run starts its context ends; negative:
		// before.
		stop time.Duration
	}{
		{"a context that ended before Run", -1},
		{"a context that ends as Run starts", 0},
		{"a context that ends a millisecond in", time.Millisecond},
		{"a context that ends ten milliseconds in", 10 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			if tt.stop < 0 {
				cancel()
			} else {
				time.AfterFunc(tt.stop, cancel)
			}
			defer cancel()
			r := &RolloutRunner{Store: st, Reader: st, KV: kv, Status: &statusRecorder{}, Log: slog.New(slog.DiscardHandler),
				StatusInterval: 10 * time.Millisecond}
			if err := r.Run(ctx); err != nil {
				t.Errorf("Run stopped by its context returned %v, want nil", err)
			}
		})
	}
}

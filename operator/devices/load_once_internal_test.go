package devices

import (
	"context"
	"iter"
	"log/slog"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
)

// countingStore is a Store whose stream holds no report of any kind: Last
// finds nothing, and counts the calls by subject.
type countingStore struct {
	mu    sync.Mutex
	lasts map[string]int
}

func (s *countingStore) Last(_ context.Context, subject string) (events.Record, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lasts == nil {
		s.lasts = map[string]int{}
	}
	s.lasts[subject]++
	return events.Record{}, events.ErrNotFound
}

func (s *countingStore) count(subject string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lasts[subject]
}

func (s *countingStore) ReplaySubjects(context.Context, []string, events.Start) iter.Seq2[events.Record, error] {
	return func(func(events.Record, error) bool) {}
}

func (s *countingStore) FollowSubjects(context.Context, []string, events.Start) iter.Seq2[events.Record, error] {
	return func(func(events.Record, error) bool) {}
}

func (s *countingStore) JetStream() jetstream.JetStream { return nil }

// TestAReportKindTheStreamLacksIsReadOnce: a device whose stream holds no
// inventory or no containers report is asked for it once, not at every
// reconcile; a live report of that kind ends the memo (and is what the
// controller then uses).
func TestAReportKindTheStreamLacksIsReadOnce(t *testing.T) {
	ctx := context.Background()
	const device = "rpi-1"
	subject := func(k events.ReportKind) string {
		s, err := events.ReportSubject(device, k)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	st := &countingStore{}
	r := &Reconciler{Store: st, Log: slog.New(slog.DiscardHandler)}
	r.telemetry = newTelemetry(nil)
	reads := func() map[string]int {
		return map[string]int{"inventory": st.count(subject(events.ReportInventory)), "containers": st.count(subject(events.ReportContainers))}
	}
	for _, step := range []struct {
		name string
		do   func()
		want map[string]int
	}{
		{"the first reconcile asks the stream for each kind", func() {}, map[string]int{"inventory": 1, "containers": 1}},
		{"a second reconcile does not ask again", func() {}, map[string]int{"inventory": 1, "containers": 1}},
		{"nor does a tenth", func() {
			for range 8 {
				if err := r.loadReports(ctx, device); err != nil {
					t.Fatal(err)
				}
			}
		}, map[string]int{"inventory": 1, "containers": 1}},
		{"a live inventory and containers report are used without a read", func() {
			r.telemetry.inventory(device, 7, events.DeviceInventory{OS: "Debian", Arch: "arm64", Kernel: "6.6", AgentVersion: "v1"})
			r.telemetry.containers(device, 8, events.DeviceContainers{})
		}, map[string]int{"inventory": 1, "containers": 1}},
	} {
		step.do()
		if err := r.loadReports(ctx, device); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(step.want, reads()); diff != "" {
			t.Errorf("%s: Last calls by kind (-want +got):\n%s", step.name, diff)
		}
	}
	if got := r.telemetry.snapshot(device); got.invSeq != 7 || got.contSeq != 8 || got.noInventory || got.noContainers {
		t.Errorf("after the live reports: inventory %d, containers %d, lacking inventory %v, containers %v; want 7 and 8, none lacking",
			got.invSeq, got.contSeq, got.noInventory, got.noContainers)
	}
}

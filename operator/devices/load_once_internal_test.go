package devices

import (
	"context"
	"iter"
	"log/slog"
	"sync"
	"testing"
	"time"

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

// TestAFollowedViewAnswersReconcilesWithoutReads: once the telemetry
// follow read every last report (the operator's start), a reconcile reads
// no report of its device from the stream; before it, a reconcile waits
// for it; a follow that cannot read within its bound costs the reads of
// before, not a stalled controller; and a device forgotten since (its
// Device deleted) is read from the stream once more.
func TestAFollowedViewAnswersReconcilesWithoutReads(t *testing.T) {
	ctx := context.Background()
	const device = "rpi-1"
	all := func(st *countingStore) int {
		n := 0
		for _, k := range []events.ReportKind{events.ReportHeartbeat, events.ReportInventory, events.ReportContainers} {
			s, err := events.ReportSubject(device, k)
			if err != nil {
				t.Fatal(err)
			}
			n += st.count(s)
		}
		return n
	}
	tests := []struct {
		name string
		// setup prepares a followed view; load runs the follow's part, if
		// any, while a reconcile waits.
		setup func(tel *telemetry)
		load  func(tel *telemetry)
		// want and wantAfter: Last calls after the first reconcile, and
		// after a second one.
		want, wantAfter int
	}{
		{"a view loaded before the reconcile answers it without a read",
			func(tel *telemetry) { tel.caughtUp(0, 2); tel.caughtUp(1, 2) }, nil, 0, 0},
		{"a reconcile that comes first waits for the load, then reads nothing",
			nil, func(tel *telemetry) { tel.caughtUp(1, 2); tel.caughtUp(0, 2) }, 0, 0},
		{"one source caught up twice is not a load: past the bound, reconciles read the stream as without a follow",
			func(tel *telemetry) { tel.loadWait = 50 * time.Millisecond; tel.caughtUp(0, 2); tel.caughtUp(0, 2) }, nil, 3, 4},
		{"a device forgotten after the load reads the stream once again",
			func(tel *telemetry) { tel.caughtUp(0, 2); tel.caughtUp(1, 2); tel.forget(device) }, nil, 3, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &countingStore{}
			r := &Reconciler{Store: st, Log: slog.New(slog.DiscardHandler)}
			r.telemetry = newTelemetry(nil)
			r.telemetry.follow()
			if tt.setup != nil {
				tt.setup(r.telemetry)
			}
			done := make(chan error, 1)
			go func() { done <- r.loadReports(ctx, device) }()
			if tt.load != nil {
				tt.load(r.telemetry)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if got := all(st); got != tt.want {
				t.Errorf("%d reads of the device's reports, want %d", got, tt.want)
			}
			if err := r.loadReports(ctx, device); err != nil {
				t.Fatal(err)
			}
			if got := all(st); got != tt.wantAfter {
				t.Errorf("%d reads after a second reconcile, want %d", got, tt.wantAfter)
			}
		})
	}
}

package events_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func heartbeat(t testing.TB, device string, n int) events.Event {
	t.Helper()
	ev, err := events.New(events.Keys{Device: device}, events.DeviceHeartbeat{AgentVersion: fmt.Sprint(n)})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func workload(t testing.TB, device string, n int, opts ...events.Option) events.Event {
	t.Helper()
	ev, err := events.New(events.Keys{Device: device}, events.WorkloadStatus{
		Namespace: "lab", Deployment: "api", UID: "u1", Generation: int64(n), Phase: events.WorkloadConverged,
	}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func inventory(t testing.TB, device string) events.Event {
	t.Helper()
	ev, err := events.New(events.Keys{Device: device}, events.DeviceInventory{OS: "linux"})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func taskStatus(t testing.TB, device string) events.Event {
	t.Helper()
	ev, err := events.New(events.Keys{Device: device}, events.TaskStatus{Namespace: "lab", TaskRun: "up"})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func commandResult(t testing.TB, device string) events.Event {
	t.Helper()
	ev, err := events.New(events.Keys{Device: device}, events.CommandResult{CommandID: "c", OK: true})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// command is a control-plane event on a device's subject: an agent command
// (acknowledged, unlike the device's reports).
func command(t testing.TB, device string) events.Event {
	t.Helper()
	ev, err := events.New(events.Keys{Device: device}, events.AgentCommand{Command: "reconcile-now"})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func transition(t testing.TB, typ events.Type, gen int64) events.Event {
	t.Helper()
	ev, err := events.New(events.Keys{Namespace: "lab", Name: "api"},
		events.NewRolloutTransition(typ, events.RolloutTransition{UID: "u1", Generation: gen}), events.WithCorrelation("u1", gen))
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func streamMsgs(t *testing.T, st *events.Store, stream string) uint64 {
	t.Helper()
	s, err := st.JetStream().Stream(testContext(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func collect(t *testing.T, seq func(func(events.Record, error) bool)) []events.Record {
	t.Helper()
	var out []events.Record
	for r, err := range seq {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestAppendSameULIDTwiceStoresOneMessage(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)
	ev := transition(t, events.TypeRolloutStarted, 1)

	first, err := st.Append(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	second, err := st.Append(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || !second.Duplicate || second.Sequence != first.Sequence {
		t.Errorf("first %+v second %+v: want the second to be a duplicate of the first", first, second)
	}
	var b events.Batch
	b.Add(ev)
	res, err := st.AppendBatch(ctx, &b)
	if err != nil || !res[0].Position.Duplicate {
		t.Errorf("batch re-append: %+v, %v", res, err)
	}
	if n := streamMsgs(t, st, events.StreamRollout); n != 1 {
		t.Errorf("stream holds %d messages, want 1", n)
	}
}

func TestStaleExpectedSequenceConflictsAndWritesNothing(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)

	p1, err := st.Append(ctx, transition(t, events.TypeRolloutStarted, 1), events.ExpectLastSubjectSequence(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, transition(t, events.TypeRolloutCanaryStage, 1), events.ExpectLastSubjectSequence(p1.Sequence)); err != nil {
		t.Fatal(err)
	}
	// A second writer still believes p1 is the last event.
	_, err = st.Append(ctx, transition(t, events.TypeRolloutReleased, 1), events.ExpectLastSubjectSequence(p1.Sequence))
	if !errors.Is(err, events.ErrConflict) {
		t.Fatalf("got %v, want ErrConflict", err)
	}
	var ce *events.ConflictError
	if !errors.As(err, &ce) || ce.Expected != p1.Sequence || ce.Subject != "fleet.rollout.deployment.lab.api" {
		t.Errorf("conflict error %#v does not name the subject and expectation", err)
	}
	// Expecting an empty subject that is not empty conflicts too.
	if _, err := st.Append(ctx, transition(t, events.TypeRolloutStarted, 2), events.ExpectLastSubjectSequence(0)); !errors.Is(err, events.ErrConflict) {
		t.Errorf("expect-empty on a used subject: %v", err)
	}
	if n := streamMsgs(t, st, events.StreamRollout); n != 2 {
		t.Errorf("stream holds %d messages, want 2: a conflicting append wrote something", n)
	}

	t.Run("in a batch only the stale event fails", func(t *testing.T) {
		var b events.Batch
		b.Add(transition(t, events.TypeRolloutSucceeded, 1), events.ExpectLastSubjectSequence(p1.Sequence))
		b.Add(command(t, "d1"))
		res, err := st.AppendBatch(ctx, &b)
		if !errors.Is(err, events.ErrConflict) {
			t.Fatalf("batch error %v, want ErrConflict", err)
		}
		if !errors.Is(res[0].Err, events.ErrConflict) || res[1].Err != nil || res[1].Position.Sequence == 0 {
			t.Errorf("results %+v", res)
		}
		if n := streamMsgs(t, st, events.StreamRollout); n != 2 {
			t.Errorf("rollout stream holds %d messages, want 2", n)
		}
		if n := streamMsgs(t, st, events.StreamCommands); n != 1 {
			t.Errorf("commands stream holds %d messages, want the batch's other event", n)
		}
	})
}

func TestInvalidEventIsRefusedBeforePublishing(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)
	bad := heartbeat(t, "d1", 1)
	bad.Keys.Device = "d.1"
	if _, err := st.Append(ctx, bad); !errors.Is(err, events.ErrInvalidEvent) || !errors.Is(err, events.ErrInvalidToken) {
		t.Errorf("Append = %v, want ErrInvalidEvent wrapping ErrInvalidToken", err)
	}
	if err := st.Report(ctx, heartbeat(t, "d1", 1), bad); !errors.Is(err, events.ErrInvalidEvent) || !errors.Is(err, events.ErrInvalidToken) {
		t.Errorf("Report = %v, want ErrInvalidEvent wrapping ErrInvalidToken", err)
	}
	badCmd := command(t, "d1")
	badCmd.Keys.Device = "d.1"
	var b events.Batch
	b.Add(command(t, "d1"))
	b.Add(badCmd)
	if _, err := st.AppendBatch(ctx, &b); !errors.Is(err, events.ErrInvalidEvent) {
		t.Errorf("AppendBatch = %v", err)
	}
	// Nothing acknowledges a report, so the refused call's valid heartbeat
	// could only show up later: a report stored after it on the same
	// connection proves it was never published (one connection's messages
	// reach a stream in order).
	if err := st.Report(ctx, heartbeat(t, "d2", 1)); err != nil {
		t.Fatal(err)
	}
	if n := streamMsgs(t, st, events.StreamLiveness); n != 1 {
		t.Errorf("%d heartbeats stored, want only the valid one reported alone: a report call with an invalid event must publish nothing", n)
	}
	if n := streamMsgs(t, st, events.StreamCommands); n != 0 {
		t.Errorf("%d commands stored, want none: a batch with an invalid event must publish nothing", n)
	}
}

// TestAppendRefusesSubjectsOnlyDevicesWrite: the report and telemetry
// streams never acknowledge, so Append and AppendBatch refuse their
// subjects at once (no publish, no wait), and Report refuses every other.
func TestAppendRefusesSubjectsOnlyDevicesWrite(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)
	for _, ev := range []events.Event{heartbeat(t, "d1", 1), workload(t, "d1", 1), inventory(t, "d1"), taskStatus(t, "d1"), commandResult(t, "d1")} {
		t.Run(string(ev.Type), func(t *testing.T) {
			start := time.Now()
			if _, err := st.Append(ctx, ev); !errors.Is(err, events.ErrDeviceWritten) {
				t.Errorf("Append = %v, want ErrDeviceWritten", err)
			}
			var b events.Batch
			b.Add(command(t, "d1"))
			b.Add(ev)
			if _, err := st.AppendBatch(ctx, &b); !errors.Is(err, events.ErrDeviceWritten) {
				t.Errorf("AppendBatch = %v, want ErrDeviceWritten", err)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the refusals took %s: they must not wait for an acknowledgement", d)
			}
		})
	}
	if err := st.Report(ctx, heartbeat(t, "d1", 1), command(t, "d1")); err == nil || !strings.Contains(err.Error(), "fleet.command.d1") {
		t.Errorf("Report of an agent command = %v, want a refusal naming its subject", err)
	}
	// A refused report could only show up later: reports stored after the
	// refusals on the same connection prove none was published.
	if err := st.Report(ctx, heartbeat(t, "d9", 1), workload(t, "d9", 1)); err != nil {
		t.Fatal(err)
	}
	for stream, want := range map[string]uint64{events.StreamReports: 1, events.StreamLiveness: 1, events.StreamTelemetry: 0, events.StreamCommands: 0} {
		if n := streamMsgs(t, st, stream); n != want {
			t.Errorf("%s holds %d messages after refused writes and the reports after them, want %d", stream, n, want)
		}
	}
}

// TestReportStoresReportsInOrderAndTheLastIsTheSubjectsLast: one call
// across both device streams waits until each stream's last report is
// stored; the reports are stored in the order given.
func TestReportStoresReportsInOrderAndTheLastIsTheSubjectsLast(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)
	var evs []events.Event
	for i := range 40 {
		evs = append(evs, workload(t, "d1", i), heartbeat(t, "d1", i), taskStatus(t, "d2"))
	}
	if err := st.Report(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	// No polling: Report returned once the last of each stream was stored.
	for _, subject := range []string{"fleet.report.d1.workload", "fleet.report.d1.heartbeat", "fleet.report.d2.task"} {
		var want string
		for _, ev := range evs {
			if s, _ := ev.Subject(); s == subject {
				want = ev.ID.String()
			}
		}
		r, err := st.Last(ctx, subject)
		if err != nil || r.Event.ID.String() != want {
			t.Errorf("Last(%s) = %s, %v; want the last reported, %s", subject, r.Event.ID, err, want)
		}
	}
	var got, want []string
	for _, ev := range evs {
		if s, _ := ev.Subject(); s == "fleet.report.d1.workload" {
			want = append(want, ev.ID.String())
		}
	}
	for _, r := range collect(t, st.Replay(ctx, "fleet.report.d1.workload", events.FromStart())) {
		got = append(got, r.Event.ID.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("stored %d workload reports in the order %v, want %v", len(got), got, want)
	}
	t.Run("a report already stored is not stored twice", func(t *testing.T) {
		before := streamMsgs(t, st, events.StreamReports)
		if err := st.Report(ctx, evs[len(evs)-1]); err != nil {
			t.Fatal(err)
		}
		if n := streamMsgs(t, st, events.StreamReports); n != before {
			t.Errorf("the reports stream holds %d messages after a re-report, want %d", n, before)
		}
	})
	t.Run("a context without a deadline is bounded by Report itself", func(t *testing.T) {
		ev := heartbeat(t, "d4", 1)
		if err := st.Report(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
		if r, err := st.Last(ctx, "fleet.report.d4.heartbeat"); err != nil || r.Event.ID != ev.ID {
			t.Errorf("Last = %s, %v; want the report %s", r.Event.ID, err, ev.ID)
		}
	})
	t.Run("a context that ends before the report is stored is an error", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := st.Report(cctx, heartbeat(t, "d3", 1)); err == nil {
			t.Error("Report with an ended context returned nil")
		}
	})
}

func TestReplay(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)

	var evs []events.Event
	var want []string
	for i := range 200 {
		dev := fmt.Sprintf("d%d", i%3)
		ev := workload(t, dev, i)
		evs = append(evs, ev)
		if dev == "d1" {
			want = append(want, ev.ID.String())
		}
	}
	if err := st.Report(ctx, evs...); err != nil {
		t.Fatal(err)
	}

	t.Run("a subject filter replays in append order from the start", func(t *testing.T) {
		recs := collect(t, st.Replay(ctx, "fleet.report.d1.workload", events.FromStart()))
		var got []string
		for i, r := range recs {
			got = append(got, r.Event.ID.String())
			if i > 0 && r.Sequence <= recs[i-1].Sequence {
				t.Fatalf("sequence %d after %d", r.Sequence, recs[i-1].Sequence)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("replayed %d events, want %d", len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("event %d is %s, want %s", i, got[i], want[i])
			}
		}
	})
	t.Run("a wildcard filter replays every matching event", func(t *testing.T) {
		if recs := collect(t, st.Replay(ctx, "fleet.report.*.workload", events.FromStart())); len(recs) != 200 {
			t.Errorf("replayed %d, want 200", len(recs))
		}
	})
	t.Run("a replay from a sequence starts there", func(t *testing.T) {
		recs := collect(t, st.Replay(ctx, "fleet.report.*.workload", events.FromSequence(151)))
		if len(recs) != 50 || recs[0].Sequence != 151 {
			t.Errorf("got %d records from seq %d", len(recs), recs[0].Sequence)
		}
	})
	t.Run("a replay of a filter with no events ends at once", func(t *testing.T) {
		if recs := collect(t, st.Replay(ctx, "fleet.report.nobody.workload", events.FromStart())); len(recs) != 0 {
			t.Errorf("got %d", len(recs))
		}
	})
	t.Run("a replay from after the last event ends at once", func(t *testing.T) {
		if recs := collect(t, st.Replay(ctx, "fleet.report.*.workload", events.FromSequence(10_000))); len(recs) != 0 {
			t.Errorf("got %d", len(recs))
		}
	})
	t.Run("a filter spanning two streams is refused", func(t *testing.T) {
		for _, err := range st.Replay(ctx, "fleet.report.d1.>", events.FromStart()) {
			if !errors.Is(err, events.ErrInvalidSubject) {
				t.Errorf("got %v", err)
			}
		}
	})
}

func TestReplayFromTime(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)
	for i := range 5 {
		if err := st.Report(ctx, workload(t, "d1", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The cut is the stored time of the last early event; wait until the
	// server clock has moved past it (poll, no sleep).
	recs := collect(t, st.Replay(ctx, "fleet.report.d1.workload", events.FromStart()))
	cut := recs[len(recs)-1].Stored.Add(time.Nanosecond)
	testenv.EventuallyErr(t, "the clock to advance past the cut", 5*time.Second, func() error {
		if now := time.Now(); !now.After(cut) {
			return fmt.Errorf("now %s, cut %s", now.Format(time.RFC3339Nano), cut.Format(time.RFC3339Nano))
		}
		return nil
	})
	var late []string
	for i := 5; i < 8; i++ {
		ev := workload(t, "d1", i)
		if err := st.Report(ctx, ev); err != nil {
			t.Fatal(err)
		}
		late = append(late, ev.ID.String())
	}
	got := collect(t, st.Replay(ctx, "fleet.report.d1.workload", events.FromTime(cut)))
	if len(got) != len(late) {
		t.Fatalf("replayed %d events from %s, want %d", len(got), cut, len(late))
	}
	for i := range late {
		if got[i].Event.ID.String() != late[i] || got[i].Stored.Before(cut) {
			t.Errorf("event %d: %s stored %s", i, got[i].Event.ID, got[i].Stored)
		}
	}
}

func TestFollowSeesLiveEvents(t *testing.T) {
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	_, st := natstest.Provisioned(t)
	// Workload reports: every one is kept (heartbeats keep only the last).
	if err := st.Report(ctx, workload(t, "d1", 0)); err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := 1; i <= 3; i++ {
			if err := st.Report(ctx, workload(t, "d1", i)); err != nil {
				return
			}
		}
	}()
	var n int
	for r, err := range st.Follow(ctx, "fleet.report.d1.workload", events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		d, _ := events.Decode[events.WorkloadStatus](r.Event)
		if d.Generation != int64(n) {
			t.Fatalf("event %d carries generation %d", n, d.Generation)
		}
		if n++; n == 4 {
			cancel()
		}
	}
	if n != 4 {
		t.Errorf("followed %d events, want 4", n)
	}
}

// TestFollowSubjectsStartsFromTheLastOfEachSubjectInOneConsumer: the
// Device controller's read of every device's telemetry: the current state
// (the last report of each subject), then every new report, through one
// consumer; a record that does not decode is handed over and passed.
func TestFollowSubjectsStartsFromTheLastOfEachSubjectInOneConsumer(t *testing.T) {
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	_, st := natstest.Provisioned(t)
	if err := st.JetStream().Conn().Publish("fleet.report.d3.heartbeat", []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	old := []events.Event{heartbeat(t, "d1", 0), heartbeat(t, "d1", 1), inventory(t, "d1"), heartbeat(t, "d2", 0), heartbeat(t, "d1", 2),
		workload(t, "d1", 1)}
	if err := st.Report(ctx, old...); err != nil {
		t.Fatal(err)
	}
	// Heartbeats (FLEET_LIVENESS) across every device; the inventory in
	// FLEET_TELEMETRY is another stream's.
	filters := []string{"fleet.report.*.heartbeat"}
	var got []string
	skipped := 0
	for r, err := range st.FollowSubjects(ctx, filters, events.FromLastPerSubject()) {
		if re, ok := events.AsRecordError(err); ok {
			if re.Subject != "fleet.report.d3.heartbeat" || re.Sequence == 0 {
				t.Errorf("the undecodable record is located at %s seq %d", re.Subject, re.Sequence)
			}
			skipped++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		label := r.Event.Keys.Device + " " + string(r.Event.Type)
		if d, err := events.Decode[events.DeviceHeartbeat](r.Event); err == nil {
			label += " " + d.AgentVersion
		}
		got = append(got, label)
		if len(got) == 2 {
			s, err := st.JetStream().Stream(ctx, events.StreamLiveness)
			if err != nil {
				t.Fatal(err)
			}
			if info, err := s.Info(ctx); err != nil || info.State.Consumers != 1 {
				t.Errorf("consumers on %s while following: %v, %v; want 1", events.StreamLiveness, info.State.Consumers, err)
			}
			if err := st.Report(ctx, heartbeat(t, "d2", 7)); err != nil {
				t.Fatal(err)
			}
		}
		if len(got) == 3 {
			cancel()
		}
	}
	want := []string{"d2 device.heartbeat 0", "d1 device.heartbeat 2", "d2 device.heartbeat 7"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("followed (-want +got):\n%s", diff)
	}
	if skipped != 1 {
		t.Errorf("%d undecodable records handed over, want 1", skipped)
	}
}

func TestFollowSubjectsRefusesFiltersOfTwoStreams(t *testing.T) {
	_, st := natstest.Provisioned(t)
	for _, err := range st.FollowSubjects(testContext(t), []string{"fleet.report.*.heartbeat", "fleet.report.*.workload"}, events.FromStart()) {
		if !errors.Is(err, events.ErrInvalidSubject) || !strings.Contains(err.Error(), "one read follows one stream") {
			t.Errorf("got %v, want ErrInvalidSubject", err)
		}
		return
	}
	t.Error("the follow yielded nothing")
}

func TestLast(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)
	var evs []events.Event
	last := map[string]string{}
	for i := range 30 {
		ev := heartbeat(t, fmt.Sprintf("d%d", i%4), i)
		evs = append(evs, ev)
		last[fmt.Sprintf("fleet.report.d%d.heartbeat", i%4)] = ev.ID.String()
	}
	if err := st.Report(ctx, evs...); err != nil {
		t.Fatal(err)
	}

	t.Run("the last event of one subject comes by direct get", func(t *testing.T) {
		r, err := st.Last(ctx, "fleet.report.d2.heartbeat")
		if err != nil {
			t.Fatal(err)
		}
		if r.Event.ID.String() != last["fleet.report.d2.heartbeat"] {
			t.Errorf("got %s", r.Event.ID)
		}
	})
	t.Run("a subject with no event is ErrNotFound", func(t *testing.T) {
		if _, err := st.Last(ctx, "fleet.report.d9.heartbeat"); !errors.Is(err, events.ErrNotFound) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("the last event of every subject of a filter comes by one direct get", func(t *testing.T) {
		recs, err := st.LastPerSubject(ctx, "fleet.report.*.heartbeat")
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 4 {
			t.Fatalf("got %d records, want 4", len(recs))
		}
		for _, r := range recs {
			if last[r.Subject] != r.Event.ID.String() {
				t.Errorf("%s: got %s, want %s", r.Subject, r.Event.ID, last[r.Subject])
			}
		}
	})
	t.Run("a filter with no subjects gives nothing", func(t *testing.T) {
		recs, err := st.LastPerSubject(ctx, "fleet.report.nobody.heartbeat")
		if err != nil || len(recs) != 0 {
			t.Errorf("got %d, %v", len(recs), err)
		}
	})
}

func TestLastPerSubjectBeyondOneDirectGet(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)
	const devices = 1500 // more than the 1024 subjects one multi-last get may match
	var evs []events.Event
	for i := range devices {
		evs = append(evs, heartbeat(t, fmt.Sprintf("d%d", i), 0), heartbeat(t, fmt.Sprintf("d%d", i), 1))
	}
	if err := st.Report(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	recs, err := st.LastPerSubject(ctx, "fleet.report.*.heartbeat")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != devices {
		t.Fatalf("got %d, want %d", len(recs), devices)
	}
	for _, r := range recs {
		d, _ := events.Decode[events.DeviceHeartbeat](r.Event)
		if d.AgentVersion != "1" {
			t.Fatalf("%s: got heartbeat %s, want the last one", r.Subject, d.AgentVersion)
		}
	}
}

func TestAcknowledgedEventsSurviveARestart(t *testing.T) {
	dir := t.TempDir()
	ctx := testContext(t)
	start := func() (*natsembed.Server, *events.Store) {
		s := natstest.StartWith(t, natsembed.Options{StoreDir: dir}) // the default (fsync always) policy
		st, err := events.NewStore(natstest.Connect(t, s), events.StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s, st
	}
	s1, st1 := start()
	if err := events.Provision(ctx, st1.JetStream(), events.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	acked := map[string]uint64{}
	for i := range 50 {
		ev := transition(t, events.TypeRolloutStarted, int64(i))
		p, err := st1.Append(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		acked[ev.ID.String()] = p.Sequence
	}
	// Reports are never acknowledged: what counts for them is what was
	// stored (read back) before the shutdown.
	var reports []events.Event
	for i := range 500 {
		reports = append(reports, workload(t, "d1", i))
	}
	if err := st1.Report(ctx, reports...); err != nil {
		t.Fatal(err)
	}
	stored := collect(t, st1.Replay(ctx, "fleet.report.d1.workload", events.FromStart()))
	if len(stored) != len(reports) {
		t.Fatalf("%d of %d reports stored before the shutdown", len(stored), len(reports))
	}
	for i, r := range stored {
		if r.Event.ID != reports[i].ID {
			t.Fatalf("stored report %d is %s, want %s", i, r.Event.ID, reports[i].ID)
		}
		acked[r.Event.ID.String()] = r.Sequence
	}
	s1.Shutdown()

	_, st2 := start()
	if err := events.Provision(ctx, st2.JetStream(), events.ProvisionOptions{}); err != nil {
		t.Fatalf("re-provisioning after restart: %v", err)
	}
	found := 0
	for _, filter := range []string{"fleet.rollout.deployment.lab.api", "fleet.report.d1.workload"} {
		for _, r := range collect(t, st2.Replay(ctx, filter, events.FromStart())) {
			seq, ok := acked[r.Event.ID.String()]
			if !ok || seq != r.Sequence {
				t.Fatalf("event %s at seq %d was not acknowledged (or, a report, stored) there", r.Event.ID, r.Sequence)
			}
			found++
		}
	}
	if found != len(acked) {
		t.Errorf("after restart %d of %d acknowledged events are there", found, len(acked))
	}
}

func TestProvision(t *testing.T) {
	ctx := testContext(t)
	s := natstest.Start(t, "")
	js, err := jetstream.New(natstest.Connect(t, s))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("provisioning twice is idempotent", func(t *testing.T) {
		for range 2 {
			if err := events.Provision(ctx, js, events.ProvisionOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		names := map[string]bool{}
		for n := range js.StreamNames(ctx).Name() {
			names[n] = true
		}
		for _, want := range []string{events.StreamIntent, events.StreamRollout, events.StreamReports, events.StreamTelemetry, events.StreamCommands, "KV_fleet-intent", "KV_fleet-identity", "OBJ_fleet-operator-state"} {
			if !names[want] {
				t.Errorf("stream %s missing; have %v", want, names)
			}
		}
	})
	t.Run("the intent bucket allows atomic batches, also after the bucket is updated again", func(t *testing.T) {
		// The rollout runner writes fleet-intent in atomic batches; an
		// update of the bucket (CreateOrUpdateKeyValue) turns it off.
		if _, err := js.CreateOrUpdateKeyValue(ctx, events.KeyValueConfigs(events.ProvisionOptions{})[0]); err != nil {
			t.Fatal(err)
		}
		if err := events.Provision(ctx, js, events.ProvisionOptions{}); err != nil {
			t.Fatal(err)
		}
		st, err := js.Stream(ctx, "KV_"+events.BucketIntent)
		if err != nil {
			t.Fatal(err)
		}
		if !st.CachedInfo().Config.AllowAtomicPublish {
			t.Error("KV_fleet-intent does not allow atomic publish after provisioning")
		}
	})
	t.Run("operators provisioning at once all succeed and leave atomic batches allowed", func(t *testing.T) {
		// Each provisioner's bucket update turns atomic publish off until
		// its own stream update turns it on again: the others must not
		// take that window for a server without atomic publish.
		for round := range 10 {
			errs := make(chan error, 4)
			for range 4 {
				js, err := jetstream.New(natstest.Connect(t, s))
				if err != nil {
					t.Fatal(err)
				}
				go func() { errs <- events.Provision(ctx, js, events.ProvisionOptions{}) }()
			}
			for range 4 {
				if err := <-errs; err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
			st, err := js.Stream(ctx, "KV_"+events.BucketIntent)
			if err != nil {
				t.Fatal(err)
			}
			if !st.CachedInfo().Config.AllowAtomicPublish {
				t.Fatalf("round %d: KV_fleet-intent does not allow atomic publish after the provisioners ended", round)
			}
		}
	})
	t.Run("a drifted stream config is corrected", func(t *testing.T) {
		cfg := events.StreamConfigs(events.ProvisionOptions{})[0]
		cfg.Duplicates = time.Second
		if _, err := js.UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		if err := events.Provision(ctx, js, events.ProvisionOptions{}); err != nil {
			t.Fatal(err)
		}
		st, _ := js.Stream(ctx, cfg.Name)
		if got := st.CachedInfo().Config.Duplicates; got != events.DefaultDuplicateWindow {
			t.Errorf("duplicate window %s after provisioning", got)
		}
	})
	t.Run("a config the server cannot change is an error naming the stream", func(t *testing.T) {
		// Replicas 3 cannot be had on a single server.
		err := events.Provision(ctx, js, events.ProvisionOptions{Replicas: 3})
		if err == nil || !containsAll(err.Error(), events.StreamIntent) {
			t.Errorf("got %v", err)
		}
	})
	t.Run("invalid options are refused with the field named", func(t *testing.T) {
		err := events.Provision(ctx, js, events.ProvisionOptions{Replicas: 9, TelemetryPerSubject: -1})
		if err == nil || !containsAll(err.Error(), "replicas", "telemetry per subject") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("telemetry keeps only the last few per device, liveness the last heartbeat", func(t *testing.T) {
		st, err := events.NewStore(natstest.Connect(t, s), events.StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 12 {
			if err := st.Report(ctx, inventory(t, "d1"), heartbeat(t, "d1", i)); err != nil {
				t.Fatal(err)
			}
		}
		if recs := collect(t, st.Replay(ctx, "fleet.report.d1.inventory", events.FromStart())); len(recs) != events.DefaultTelemetryPerSubject {
			t.Errorf("kept %d inventories, want %d", len(recs), events.DefaultTelemetryPerSubject)
		}
		if recs := collect(t, st.Replay(ctx, "fleet.report.d1.heartbeat", events.FromStart())); len(recs) != 1 {
			t.Errorf("kept %d heartbeats, want the last one", len(recs))
		}
	})
}

func TestReadsLeaveNoConsumerBehind(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)
	if err := st.Report(ctx, heartbeat(t, "d1", 1)); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		collect(t, st.Replay(ctx, "fleet.report.d1.heartbeat", events.FromStart()))
	}
	s, err := st.JetStream().Stream(ctx, events.StreamTelemetry)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Errorf("%d consumers left on the stream after 20 replays, want 0", info.State.Consumers)
	}
}

// TestAFloodingDeviceDiscardsOnlyItsOwnOldestReports: the reports stream
// keeps ReportsPerSubject reports per device and kind, so a device that
// floods its workload subject pushes out its own oldest reports and nobody
// else's.
func TestAFloodingDeviceDiscardsOnlyItsOwnOldestReports(t *testing.T) {
	ctx := testContext(t)
	s := natstest.StartWith(t, natsembed.Options{StoreDir: t.TempDir(), Sync: natsembed.FastSync})
	st, err := events.NewStore(natstest.Connect(t, s), events.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Provision(ctx, st.JetStream(), events.ProvisionOptions{ReportsPerSubject: 5}); err != nil {
		t.Fatal(err)
	}
	// Devices' core publishes (the stream never acknowledges), in order on
	// one connection: once the last is stored, so is every earlier one the
	// stream kept.
	var msgs []*nats.Msg
	publish := func(subject string, n int) {
		for i := range n {
			msgs = append(msgs, &nats.Msg{Subject: subject, Data: fmt.Appendf(nil, "%d", i)})
		}
	}
	publish("fleet.report.quiet.workload", 3)
	publish("fleet.report.flood.workload", 100)
	publish("fleet.report.flood.task", 2)
	natstest.PublishStored(t, st.JetStream().Conn(), msgs...)
	stream, err := st.JetStream().Stream(ctx, events.StreamReports)
	if err != nil {
		t.Fatal(err)
	}
	for subject, want := range map[string]uint64{"fleet.report.quiet.workload": 3, "fleet.report.flood.workload": 5, "fleet.report.flood.task": 2} {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		if got := info.State.Subjects[subject]; got != want {
			t.Errorf("%s keeps %d reports, want %d", subject, got, want)
		}
	}
	m, err := stream.GetLastMsgForSubject(ctx, "fleet.report.flood.workload")
	if err != nil || string(m.Data) != "99" {
		t.Errorf("the flooding device's newest report: %v %v, want 99", m, err)
	}
}

package events_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natsembed"
	"github.com/nationtech/harmony-fleet/internal/natstest"
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
		b.Add(heartbeat(t, "d1", 1))
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
	var b events.Batch
	b.Add(heartbeat(t, "d1", 1))
	b.Add(bad)
	if _, err := st.AppendBatch(ctx, &b); !errors.Is(err, events.ErrInvalidEvent) {
		t.Errorf("AppendBatch = %v", err)
	}
	if n := streamMsgs(t, st, events.StreamTelemetry); n != 0 {
		t.Errorf("%d messages stored, want none: a batch with an invalid event must publish nothing", n)
	}
}

func TestReplay(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)

	var b events.Batch
	var want []string
	for i := range 200 {
		dev := fmt.Sprintf("d%d", i%3)
		ev := workload(t, dev, i)
		b.Add(ev)
		if dev == "d1" {
			want = append(want, ev.ID.String())
		}
	}
	if _, err := st.AppendBatch(ctx, &b); err != nil {
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
		if _, err := st.Append(ctx, workload(t, "d1", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The cut is the stored time of the last early event; wait until the
	// server clock has moved past it (poll, no sleep).
	recs := collect(t, st.Replay(ctx, "fleet.report.d1.workload", events.FromStart()))
	cut := recs[len(recs)-1].Stored.Add(time.Nanosecond)
	for deadline := time.Now().Add(5 * time.Second); !time.Now().After(cut); {
		if time.Now().After(deadline) {
			t.Fatal("clock did not advance")
		}
	}
	var late []string
	for i := 5; i < 8; i++ {
		ev := workload(t, "d1", i)
		if _, err := st.Append(ctx, ev); err != nil {
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
	if _, err := st.Append(ctx, heartbeat(t, "d1", 0)); err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := 1; i <= 3; i++ {
			if _, err := st.Append(ctx, heartbeat(t, "d1", i)); err != nil {
				return
			}
		}
	}()
	var n int
	for r, err := range st.Follow(ctx, "fleet.report.d1.heartbeat", events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		d, _ := events.Decode[events.DeviceHeartbeat](r.Event)
		if d.AgentVersion != fmt.Sprint(n) {
			t.Fatalf("event %d carries %q", n, d.AgentVersion)
		}
		if n++; n == 4 {
			cancel()
		}
	}
	if n != 4 {
		t.Errorf("followed %d events, want 4", n)
	}
}

func TestLast(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)
	var b events.Batch
	last := map[string]string{}
	for i := range 30 {
		ev := heartbeat(t, fmt.Sprintf("d%d", i%4), i)
		b.Add(ev)
		last[fmt.Sprintf("fleet.report.d%d.heartbeat", i%4)] = ev.ID.String()
	}
	if _, err := st.AppendBatch(ctx, &b); err != nil {
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
	var b events.Batch
	for i := range devices {
		b.Add(heartbeat(t, fmt.Sprintf("d%d", i), 0))
		b.Add(heartbeat(t, fmt.Sprintf("d%d", i), 1))
	}
	if _, err := st.AppendBatch(ctx, &b); err != nil {
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
	var b events.Batch
	for i := range 500 {
		b.Add(workload(t, "d1", i))
	}
	res, err := st1.AppendBatch(ctx, &b)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		acked[b.Events()[i].ID.String()] = r.Position.Sequence
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
				t.Fatalf("event %s at seq %d was not acknowledged there", r.Event.ID, r.Sequence)
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
	t.Run("telemetry keeps only the last few per device", func(t *testing.T) {
		st, err := events.NewStore(natstest.Connect(t, s), events.StoreOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 12 {
			if _, err := st.Append(ctx, heartbeat(t, "d1", i)); err != nil {
				t.Fatal(err)
			}
		}
		if recs := collect(t, st.Replay(ctx, "fleet.report.d1.heartbeat", events.FromStart())); len(recs) != events.DefaultTelemetryPerSubject {
			t.Errorf("kept %d heartbeats, want %d", len(recs), events.DefaultTelemetryPerSubject)
		}
	})
}

func TestReadsLeaveNoConsumerBehind(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)
	if _, err := st.Append(ctx, heartbeat(t, "d1", 1)); err != nil {
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
	publish := func(subject string, n int) {
		for i := range n {
			if _, err := st.JetStream().Publish(ctx, subject, fmt.Appendf(nil, "%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("fleet.report.quiet.workload", 3)
	publish("fleet.report.flood.workload", 100)
	publish("fleet.report.flood.task", 2)
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

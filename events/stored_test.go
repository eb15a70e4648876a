package events_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
)

// baseEvents are valid events of every subject family, one each.
func baseEvents(t testing.TB) []events.Event {
	t.Helper()
	var out []events.Event
	add := func(keys events.Keys, d events.Data, opts ...events.Option) {
		ev, err := events.New(keys, d, opts...)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
	add(events.Keys{Device: "d1"}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1, Phase: events.WorkloadConverged})
	add(events.Keys{Device: "d1"}, events.DeviceHeartbeat{AgentVersion: "1"})
	add(events.Keys{Device: "d1"}, events.DeviceInventory{OS: "Debian"})
	add(events.Keys{Device: "d1"}, events.TaskStatus{Namespace: "lab", TaskRun: "up"})
	add(events.Keys{Device: "d1"}, events.CommandResult{CommandID: "c", OK: true})
	add(events.Keys{Device: "d1"}, events.AgentCommand{Command: "reconcile-now"})
	add(events.Keys{Namespace: "lab", Name: "api"}, events.DeploymentRevisionCreated{UID: "u1", Generation: 1})
	add(events.Keys{Namespace: "lab", Name: "api"}, events.NewRolloutTransition(events.TypeRolloutStarted, events.RolloutTransition{UID: "u1", Generation: 1}))
	return out
}

func TestDecodeStoredRefusesEveryPoisonVariantWithItsReason(t *testing.T) {
	for _, base := range baseEvents(t) {
		subject, err := base.Subject()
		if err != nil {
			t.Fatal(err)
		}
		t.Run(string(base.Type), func(t *testing.T) {
			t.Run("the valid event decodes with its keys", func(t *testing.T) {
				payload, _ := base.Marshal()
				ev, err := events.DecodeStored(subject, payload)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(base.Keys, ev.Keys); diff != "" {
					t.Errorf("keys (-want +got):\n%s", diff)
				}
			})
			for _, tc := range poisontest.For(t, base) {
				t.Run(tc.Name, func(t *testing.T) {
					_, err := events.DecodeStored(subject, tc.Payload)
					if tc.Reason == events.ReasonInvalidData {
						if err != nil {
							t.Fatalf("DecodeStored refused an envelope only its data is wrong in: %v", err)
						}
						return
					}
					re, ok := events.AsRecordError(err)
					if !ok {
						t.Fatalf("DecodeStored = %v, want a *RecordError", err)
					}
					if !errors.Is(err, events.ErrUndecodable) {
						t.Errorf("%v does not match ErrUndecodable", err)
					}
					want := &events.RecordError{Stream: mustStream(t, subject), Subject: subject, Size: len(tc.Payload), Reason: tc.Reason}
					if diff := cmp.Diff(want, re, cmpRecordError); diff != "" {
						t.Errorf("record error (-want +got):\n%s", diff)
					}
					if msg := err.Error(); len(msg) > 400 || (len(tc.Payload) > 20 && strings.Contains(msg, string(tc.Payload[:20]))) {
						t.Errorf("the error quotes the payload or is too long (%d bytes): %.200s", len(msg), msg)
					}
				})
			}
		})
	}
	t.Run("a report whose device key names another device is refused with both subjects named", func(t *testing.T) {
		ev, _ := events.New(events.Keys{Device: "canary-b"}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1", Generation: 1, Phase: events.WorkloadConverged})
		payload, _ := ev.Marshal()
		_, err := events.DecodeStored("fleet.report.device-a.workload", payload)
		if !errors.Is(err, events.ErrUndecodable) || !containsAll(err.Error(), "fleet.report.canary-b.workload", "fleet.report.device-a.workload", "subject-mismatch") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("a record on a subject that is not a Fleet subject is refused", func(t *testing.T) {
		ev, _ := events.New(events.Keys{Device: "d1"}, events.DeviceHeartbeat{})
		payload, _ := ev.Marshal()
		if _, err := events.DecodeStored("elsewhere.d1", payload); !errors.Is(err, events.ErrUndecodable) {
			t.Errorf("got %v", err)
		}
	})
}

var cmpRecordError = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Err" }, cmp.Ignore())

func mustStream(t testing.TB, subject string) string {
	t.Helper()
	s, err := events.StreamOf(subject)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNewDropsKeysItsFamilyDoesNotUseAndValidateRefusesThem(t *testing.T) {
	ev, err := events.New(events.Keys{Namespace: "lab", Name: "api", Device: "d1"}, events.DeviceHeartbeat{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(events.Keys{Device: "d1"}, ev.Keys); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	ev.Keys.Namespace = "lab"
	if err := ev.Validate(); !errors.Is(err, events.ErrInvalidEvent) {
		t.Errorf("Validate of a report with a namespace key = %v, want ErrInvalidEvent", err)
	}
}

// FuzzDecodeStored feeds arbitrary payloads to the stored-record decoder:
// it never panics, and either refuses with a *RecordError or returns an
// event that belongs exactly on the subject it was stored on.
func FuzzDecodeStored(f *testing.F) {
	for _, base := range baseEvents(f) {
		good, _ := base.Marshal()
		f.Add(good)
		for _, tc := range poisontest.For(f, base) {
			if len(tc.Payload) < 4096 {
				f.Add(tc.Payload)
			}
		}
	}
	const subject = "fleet.report.d1.workload"
	f.Fuzz(func(t *testing.T, payload []byte) {
		ev, err := events.DecodeStored(subject, payload)
		if err != nil {
			re, ok := events.AsRecordError(err)
			if !ok || !errors.Is(err, events.ErrUndecodable) || re.Subject != subject || re.Size != len(payload) || re.Reason == "" {
				t.Fatalf("refusal %#v is not a located *RecordError", err)
			}
			return
		}
		got, serr := ev.Subject()
		if serr != nil || got != subject || ev.Keys != (events.Keys{Device: "d1"}) {
			t.Fatalf("accepted an event of subject %q (%v) with keys %+v on %s", got, serr, ev.Keys, subject)
		}
	})
}

// publishRaw stores payload on a report subject as a device could,
// bypassing the events writer: a core publish (the report streams never
// acknowledge), waited for until stored. It returns the stream sequence.
func publishRaw(t *testing.T, st *events.Store, subject string, payload []byte) uint64 {
	t.Helper()
	return natstest.PublishStored(t, st.JetStream().Conn(), &nats.Msg{Subject: subject, Data: payload})
}

// reportAt reports ev (as a stand-in device) and returns its stream
// sequence: Report returns once it is its subject's last record.
func reportAt(t *testing.T, st *events.Store, ev events.Event) uint64 {
	t.Helper()
	ctx := testContext(t)
	if err := st.Report(ctx, ev); err != nil {
		t.Fatal(err)
	}
	subject, err := ev.Subject()
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.Last(ctx, subject)
	if err != nil || rec.Event.ID != ev.ID {
		t.Fatalf("Last(%s) after Report = %s, %v; want %s", subject, rec.Event.ID, err, ev.ID)
	}
	return rec.Sequence
}

type step struct {
	Seq    uint64
	OK     bool
	Reason events.SkipReason
}

func TestReadersSkipUndecodableRecordsAndGoOn(t *testing.T) {
	ctx := testContext(t)
	_, st := natstest.Provisioned(t)
	const subject = "fleet.report.d1.workload"
	base := workload(t, "d1", 1)
	var want []step
	appendGood := func(n int) {
		want = append(want, step{Seq: reportAt(t, st, workload(t, "d1", n)), OK: true})
	}
	appendGood(1)
	for _, tc := range poisontest.For(t, base) {
		seq := publishRaw(t, st, subject, tc.Payload)
		if tc.Reason == events.ReasonInvalidData {
			want = append(want, step{Seq: seq, OK: true})
			continue
		}
		want = append(want, step{Seq: seq, Reason: tc.Reason})
	}
	appendGood(2)

	steps := func(seq func(func(events.Record, error) bool), stopAfter int) []step {
		var got []step
		for rec, err := range seq {
			if err != nil {
				re, ok := events.AsRecordError(err)
				if !ok {
					t.Fatalf("read ended with %v", err)
				}
				if rec.Sequence != re.Sequence || rec.Subject != subject || rec.Stream != events.StreamReports || re.Stream != events.StreamReports || rec.Stored.IsZero() {
					t.Errorf("record %+v does not carry where %v is stored", rec, err)
				}
				got = append(got, step{Seq: re.Sequence, Reason: re.Reason})
			} else {
				got = append(got, step{Seq: rec.Sequence, OK: true})
			}
			if len(got) == stopAfter {
				break
			}
		}
		return got
	}
	t.Run("a replay yields each undecodable record as a record error and goes on to the end", func(t *testing.T) {
		if diff := cmp.Diff(want, steps(st.Replay(ctx, subject, events.FromStart()), 0)); diff != "" {
			t.Errorf("replay (-want +got):\n%s", diff)
		}
	})
	t.Run("a follow does the same and keeps following", func(t *testing.T) {
		fctx, cancel := context.WithCancel(ctx)
		defer cancel()
		got := steps(st.Follow(fctx, subject, events.FromStart()), len(want))
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("follow (-want +got):\n%s", diff)
		}
	})
	t.Run("a replay resumed after a skipped record's sequence starts after it", func(t *testing.T) {
		if diff := cmp.Diff(want[2:], steps(st.Replay(ctx, subject, events.FromSequence(want[1].Seq+1)), 0)); diff != "" {
			t.Errorf("replay (-want +got):\n%s", diff)
		}
	})
	t.Run("last on a subject whose last record is undecodable returns a record error and where it is", func(t *testing.T) {
		seq := publishRaw(t, st, "fleet.report.d2.heartbeat", []byte(`{"stream":"FLEET_TELEMETRY","seq":5}`))
		rec, err := st.Last(ctx, "fleet.report.d2.heartbeat")
		re, ok := events.AsRecordError(err)
		if !ok || re.Sequence != seq || rec.Sequence != seq || re.Reason != events.ReasonNotAnEnvelope || re.Stream != events.StreamLiveness {
			t.Errorf("Last = %+v, %v", rec, err)
		}
	})
}

func TestLastPerSubjectLeavesOutCountsAndLogsUndecodableRecords(t *testing.T) {
	ctx := testContext(t)
	srv, _ := natstest.Provisioned(t)
	skips := events.NewSkipCounter()
	var logs strings.Builder
	st, err := events.NewStore(natstest.Connect(t, srv), events.StoreOptions{Skips: skips,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := st.Report(ctx, heartbeat(t, fmt.Sprintf("d%d", i), 1)); err != nil {
			t.Fatal(err)
		}
	}
	secret := "hostile-payload-" + strings.Repeat("x", 64)
	publishRaw(t, st, "fleet.report.d1.heartbeat", []byte(secret))
	publishRaw(t, st, "fleet.report.d9.heartbeat", []byte(`{"stream":"FLEET_TELEMETRY","seq":5}`))
	recs, err := st.LastPerSubject(ctx, "fleet.report.*.heartbeat")
	if err != nil {
		t.Fatal(err)
	}
	var subjects []string
	for _, r := range recs {
		subjects = append(subjects, r.Subject)
	}
	if diff := cmp.Diff([]string{"fleet.report.d0.heartbeat", "fleet.report.d2.heartbeat"}, subjects); diff != "" {
		t.Errorf("subjects (-want +got):\n%s", diff)
	}
	if n := skips.Skipped(events.StreamLiveness, events.ReasonNotAnEnvelope); n != 2 {
		t.Errorf("counted %d skipped records, want 2", n)
	}
	if !containsAll(logs.String(), "undecodable record skipped", "stream=FLEET_LIVENESS", "subject=fleet.report.d1.heartbeat", "seq=", "reason=not-an-envelope", "bytes=80") {
		t.Errorf("log does not name stream, subject, sequence, reason and size:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "hostile-payload") {
		t.Errorf("the log quotes the payload:\n%s", logs.String())
	}
}

func TestSkipCounter(t *testing.T) {
	t.Run("a nil counter counts nothing and does not panic", func(t *testing.T) {
		var c *events.SkipCounter
		c.Count(events.StreamReports, events.ReasonNotAnEnvelope)
		c.Skip(context.Background(), nil, &events.RecordError{Stream: events.StreamReports, Reason: events.ReasonNotAnEnvelope})
		if c.Skipped(events.StreamReports, "") != 0 || c.Collector() != nil {
			t.Error("a nil counter counted")
		}
	})
	t.Run("counts by stream and reason and registers with a registry of the binary's choice", func(t *testing.T) {
		c := events.NewSkipCounter()
		c.Count(events.StreamReports, events.ReasonNotAnEnvelope)
		c.Count(events.StreamReports, events.ReasonNotAnEnvelope)
		c.Skip(context.Background(), nil, &events.RecordError{Stream: events.StreamReports, Reason: events.ReasonSubjectMismatch, Err: errors.New("x")})
		c.Count(events.StreamRollout, events.ReasonInvalidEnvelope)
		got := map[string]uint64{
			"reports/not-an-envelope": c.Skipped(events.StreamReports, events.ReasonNotAnEnvelope),
			"reports/all":             c.Skipped(events.StreamReports, ""),
			"rollout/all":             c.Skipped(events.StreamRollout, ""),
			"intent/all":              c.Skipped(events.StreamIntent, ""),
		}
		if diff := cmp.Diff(map[string]uint64{"reports/not-an-envelope": 2, "reports/all": 3, "rollout/all": 1, "intent/all": 0}, got); diff != "" {
			t.Errorf("counts (-want +got):\n%s", diff)
		}
		reg := prometheus.NewRegistry()
		if err := reg.Register(c.Collector()); err != nil {
			t.Fatal(err)
		}
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		if len(families) != 1 || families[0].GetName() != events.SkippedRecordsMetric || len(families[0].GetMetric()) != 3 {
			t.Errorf("gathered %v", families)
		}
	})
}

// countingHandler counts the records it is given.
type countingHandler struct{ n *int }

func (h countingHandler) Enabled(context.Context, slog.Level) bool  { return true }
func (h countingHandler) Handle(context.Context, slog.Record) error { *h.n++; return nil }
func (h countingHandler) WithAttrs([]slog.Attr) slog.Handler        { return h }
func (h countingHandler) WithGroup(string) slog.Handler             { return h }

// TestAFloodOfUndecodableRecordsCostsOneWarningLinePerInterval: the counter
// counts every record, the log gets one line per stream and reason per
// SkipLogInterval.
func TestAFloodOfUndecodableRecordsCostsOneWarningLinePerInterval(t *testing.T) {
	c := events.NewSkipCounter()
	var lines int
	log := slog.New(countingHandler{&lines})
	for i := range 1000 {
		c.Skip(context.Background(), log, &events.RecordError{Stream: events.StreamReports, Subject: "fleet.report.a.workload",
			Sequence: uint64(i + 1), Reason: events.ReasonNotAnEnvelope, Err: errors.New("not an envelope")})
	}
	c.Skip(context.Background(), log, &events.RecordError{Stream: events.StreamTelemetry, Subject: "fleet.report.a.heartbeat",
		Sequence: 1, Reason: events.ReasonNotAnEnvelope, Err: errors.New("not an envelope")})
	if got := c.Skipped(events.StreamReports, events.ReasonNotAnEnvelope); got != 1000 {
		t.Errorf("counted %d, want 1000", got)
	}
	if lines != 2 {
		t.Errorf("%d warning lines, want 2 (one per stream and reason within %s)", lines, events.SkipLogInterval)
	}
}

// TestHeadersADeviceStoredNeverDecideWhatAReadSees: a stored message keeps
// its publisher's headers, and a direct get answers with them before the
// server's own. A device that stores Nats-Subject (naming another device),
// Nats-Sequence and Status headers on its own report subject neither
// speaks for another device nor ends a batched read early nor breaks Last.
func TestHeadersADeviceStoredNeverDecideWhatAReadSees(t *testing.T) {
	ctx := context.Background()
	_, st := natstest.Provisioned(t)
	hb := func(device string) []byte {
		ev, err := events.New(events.Keys{Device: device}, events.DeviceHeartbeat{AgentVersion: "1"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := ev.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	publish := func(m *nats.Msg) {
		t.Helper()
		natstest.PublishStored(t, st.JetStream().Conn(), m)
	}
	// d1 claims, in headers and keys, to be d2; then a status that would
	// end a batch, a bad sequence, and a status with an empty body.
	publish(&nats.Msg{Subject: "fleet.report.d1.heartbeat", Data: hb("d2"), Header: nats.Header{
		"Nats-Subject": {"fleet.report.d2.heartbeat"}, "Nats-Sequence": {"999"}, "Nats-Time-Stamp": {"2000-01-01T00:00:00Z"}}})
	publish(&nats.Msg{Subject: "fleet.report.d3.heartbeat", Data: hb("d3"), Header: nats.Header{"Status": {"204"}, "Nats-Num-Pending": {"0"}}})
	publish(&nats.Msg{Subject: "fleet.report.d4.heartbeat", Data: hb("d4"), Header: nats.Header{"Nats-Sequence": {"x"}, "Status": {"404"}}})
	publish(&nats.Msg{Subject: "fleet.report.d5.heartbeat", Data: hb("d5")})

	recs, err := st.LastPerSubject(ctx, "fleet.report.*.heartbeat")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, fmt.Sprintf("%s seq %d device %s", r.Subject, r.Sequence, r.Event.Keys.Device))
	}
	want := []string{"fleet.report.d3.heartbeat seq 2 device d3", "fleet.report.d4.heartbeat seq 3 device d4", "fleet.report.d5.heartbeat seq 4 device d5"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("last per subject (-want +got):\n%s", diff)
	}
	rec, err := st.Last(ctx, "fleet.report.d1.heartbeat")
	if !errors.Is(err, events.ErrUndecodable) || rec.Subject != "fleet.report.d1.heartbeat" || rec.Sequence != 1 {
		t.Errorf("Last of d1's forged heartbeat: %+v, %v; want its own subject, sequence 1 and a subject mismatch", rec, err)
	}
	rec, err = st.Last(ctx, "fleet.report.d4.heartbeat")
	if err != nil || rec.Sequence != 3 || rec.Event.Keys.Device != "d4" {
		t.Errorf("Last of d4's heartbeat with a bad Nats-Sequence header: %+v, %v", rec, err)
	}
}

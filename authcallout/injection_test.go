package authcallout_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// The reply-subject injection suite. NATS checks a publish's subject
// against the user's permissions, never its reply subject, and JetStream
// answers (publish acks, direct-get replies, API errors) to that reply
// subject. The suite is generated, not hand-listed: every subject device A
// may publish on × every reply-subject target (other devices' KV keys,
// inboxes and command subjects, each stream's subjects, every $JS.API verb
// on every stream and bucket, $KV.*, $O.*, $SYS.*) × bodies and headers
// (empty, a JSON ack, a JSON API error, garbage, hostile JetStream headers).
// It compares every stream's messages and every KV value before and after
// and fails on any change outside A's own report subjects, and on anything
// B's notification and command subscriptions receive from A.

// injectionStreams are every stream and bucket the control plane holds.
var injectionStreams = []string{
	events.StreamIntent, events.StreamRollout, events.StreamReports, events.StreamTelemetry, events.StreamLiveness, events.StreamCommands, events.StreamAudit,
	"KV_" + events.BucketIntent, "KV_" + events.BucketIdentity, "OBJ_" + events.BucketOperatorState,
}

// jsAPIVerbs are the JetStream API subjects that take a stream name (and,
// for consumers, more tokens).
var jsAPIVerbs = []string{
	"STREAM.CREATE.%s", "STREAM.UPDATE.%s", "STREAM.DELETE.%s", "STREAM.PURGE.%s", "STREAM.INFO.%s",
	"STREAM.MSG.DELETE.%s", "STREAM.MSG.GET.%s", "STREAM.SNAPSHOT.%s", "STREAM.RESTORE.%s",
	"STREAM.LEADER.STEPDOWN.%s", "STREAM.PEER.REMOVE.%s",
	"CONSUMER.CREATE.%s", "CONSUMER.CREATE.%s.steal", "CONSUMER.CREATE.%s.steal.>", "CONSUMER.DURABLE.CREATE.%s.steal",
	"CONSUMER.DELETE.%s.steal", "CONSUMER.INFO.%s.steal", "CONSUMER.LIST.%s", "CONSUMER.NAMES.%s",
	"CONSUMER.MSG.NEXT.%s.steal", "CONSUMER.PAUSE.%s.steal", "DIRECT.GET.%s",
}

// replyTargets are the subjects a hostile device aims JetStream's answers
// at, with the names of devices b (another device) and its identity
// subject.
func replyTargets(b, bIdentity string) []string {
	t := []string{
		// Another device's KV key, inbox, command subject and reports.
		"$KV.fleet-intent." + b, "fleet.notify.intent." + b, "$KV.fleet-identity." + bIdentity, "$KV.fleet-identity." + b,
		authcallout.InboxPrefix(b) + ".x", authcallout.InboxPrefix(b) + ".x.y",
		"fleet.command." + b,
		"fleet.report." + b + ".workload", "fleet.report." + b + ".heartbeat", "fleet.report." + b + ".inventory",
		"fleet.report." + b + ".task", "fleet.report." + b + ".command",
		// Each stream's subjects.
		"fleet.intent.deployment.ns.web", "fleet.intent.taskrun.ns.up", "fleet.rollout.deployment.ns.web",
		// KV and object store subjects.
		"$KV.fleet-intent.new-device", "$O.fleet-operator-state.C.x", "$O.fleet-operator-state.M.rollout-runner",
		// The JetStream API without a stream, and acks.
		"$JS.API.INFO", "$JS.API.STREAM.LIST", "$JS.API.STREAM.NAMES", "$JS.API.ACCOUNT.PURGE.FLEET",
		"$JS.API.META.LEADER.STEPDOWN", "$JS.ACK.FLEET_REPORTS.x.1.1.1.1.1", "$JS.FC.FLEET_REPORTS.x",
		// The system account's services.
		"$SYS.REQ.SERVER.PING", "$SYS.REQ.USER.AUTH", "$SYS.REQ.ACCOUNT.FLEET.CONNZ", "$SYS.REQ.SERVER.PING.CONNZ",
		"$SYS.REQ.ACCOUNT.PING.STATZ",
	}
	for _, s := range injectionStreams {
		for _, v := range jsAPIVerbs {
			t = append(t, "$JS.API."+fmt.Sprintf(v, s))
		}
	}
	return t
}

// injectionBody is one payload (with headers) a hostile device sends.
type injectionBody struct {
	name   string
	data   []byte
	header nats.Header
	// oversized: the report streams refuse it (over events.MaxReportSize).
	oversized bool
}

var injectionBodies = []injectionBody{
	{name: "empty"},
	{name: "a JSON publish ack", data: []byte(`{"stream":"FLEET_ROLLOUT","seq":1}`)},
	{name: "a JSON API error", data: []byte(`{"error":{"code":408,"description":"request timeout"}}`)},
	{name: "garbage", data: []byte("\x00\xffnot json {{{")},
	{name: "a stream configuration", data: []byte(`{"name":"FLEET_ROLLOUT","subjects":["fleet.>"],"max_msgs":1}`)},
	{name: "hostile JetStream headers", data: []byte(`{}`), header: nats.Header{
		"Nats-Expected-Last-Subject-Sequence": {"0"}, "Nats-Expected-Stream": {"FLEET_ROLLOUT"},
		"Nats-Msg-Id": {"dup"}, "Nats-Rollup": {"all"}, "Status": {"408"}, "Nats-TTL": {"1s"},
		"Nats-Expected-Last-Sequence": {"0"}}},
	// Over the report streams' largest message (below the account's
	// max_payload, so the device stays connected): refused, stored nowhere.
	{name: "a body over the report streams' largest message", data: bytes.Repeat([]byte("o"), events.MaxReportSize+1), oversized: true},
}

// streamMessage is one stored message of a snapshot.
type streamMessage struct {
	Seq     uint64
	Subject string
	Data    string
}

// snapshotStreams reads every message of every control-plane stream (with
// KV history), keyed by stream. A stream that no longer exists is recorded
// as such.
func snapshotStreams(tb testing.TB, js jetstream.JetStream) map[string][]streamMessage {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := map[string][]streamMessage{}
	for _, name := range injectionStreams {
		st, err := js.Stream(ctx, name)
		if err != nil {
			out[name] = []streamMessage{{Subject: "MISSING: " + err.Error()}}
			continue
		}
		info, err := st.Info(ctx)
		if err != nil {
			tb.Fatal(err)
		}
		msgs := []streamMessage{{Subject: fmt.Sprintf("state first=%d last=%d msgs=%d deleted=%d", info.State.FirstSeq, info.State.LastSeq, info.State.Msgs, info.State.NumDeleted)}}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				msgs = append(msgs, streamMessage{Seq: seq, Subject: "deleted"})
				continue
			}
			msgs = append(msgs, streamMessage{Seq: seq, Subject: m.Subject, Data: string(m.Data)})
		}
		out[name] = msgs
	}
	return out
}

// onlyOwnReports removes from after every message A may store (its own
// report subjects) that before lacks, and the state lines that these
// messages change.
func onlyOwnReports(before, after map[string][]streamMessage, a string) map[string][]streamMessage {
	out := map[string][]streamMessage{}
	for name, msgs := range after {
		known := map[uint64]bool{}
		for _, m := range before[name] {
			known[m.Seq] = true
		}
		var kept []streamMessage
		for i, m := range msgs {
			if i == 0 && (name == events.StreamReports || name == events.StreamTelemetry || name == events.StreamLiveness) {
				kept = append(kept, before[name][0]) // the state line moves with A's reports
				continue
			}
			// A new message of A's, or one of A's that its stream's limits
			// (telemetry keeps the last few per subject) already removed.
			if !known[m.Seq] && (strings.HasPrefix(m.Subject, "fleet.report."+a+".") || m.Subject == "deleted") {
				continue
			}
			kept = append(kept, m)
		}
		out[name] = kept
	}
	return out
}

func TestAHostileDeviceReachesNothingThroughReplySubjects(t *testing.T) {
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	srcA := e.device(t, "dev-a", false)
	srcB := e.device(t, "dev-b", false)
	// Something in every stream and bucket, so a purge or delete shows.
	// The report streams never acknowledge: a report seed is a core
	// publish, waited for until stored.
	seed := func(subj, data string) {
		if natstest.DeviceWritten(subj) {
			natstest.PublishStored(t, e.admin, &nats.Msg{Subject: subj, Data: []byte(data)})
			return
		}
		if _, err := e.js.Publish(ctx, subj, []byte(data)); err != nil {
			t.Fatalf("seed %s: %v", subj, err)
		}
	}
	seed("fleet.intent.deployment.ns.web", `{"seed":"intent"}`)
	seed("fleet.rollout.deployment.ns.web", `{"seed":"rollout"}`)
	seed("fleet.report.dev-b.workload", `{"seed":"report"}`)
	seed("fleet.report.dev-b.heartbeat", `{"seed":"telemetry"}`)
	seed("fleet.command.dev-b", `{"seed":"command"}`)
	if _, err := e.intent.Put(ctx, "dev-a", []byte(`{"intent":"a"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.intent.Put(ctx, "dev-b", []byte(`{"intent":"b"}`)); err != nil {
		t.Fatal(err)
	}
	obj, err := e.js.ObjectStore(ctx, events.BucketOperatorState)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obj.PutBytes(ctx, "rollout-runner", []byte(`{"seed":"checkpoint"}`)); err != nil {
		t.Fatal(err)
	}
	before := snapshotStreams(t, e.js)

	// B listens where A might reach it: its notification and command
	// subjects (the agent's two subscriptions).
	b, err := e.connect("dev-b", srcB, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var mu sync.Mutex
	var reachedB []string
	for _, subj := range []string{"fleet.notify.intent.dev-b", "fleet.command.dev-b"} {
		if _, err := b.Subscribe(subj, func(m *nats.Msg) {
			mu.Lock()
			reachedB = append(reachedB, fmt.Sprintf("%s: %q", m.Subject, m.Data))
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}

	a, err := e.connect("dev-a", srcA, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	var own []string
	for _, k := range authcallout.ReportKinds {
		s, _ := events.ReportSubject("dev-a", k)
		own = append(own, s)
	}
	dg, _ := events.IntentDirectGetSubject("dev-a")
	own = append(own, dg)

	targets := replyTargets("dev-b", srcB.Subject())
	sent := 0
	for _, subj := range own {
		for _, reply := range targets {
			for _, body := range injectionBodies {
				m := &nats.Msg{Subject: subj, Reply: reply, Data: body.data, Header: body.header}
				if err := a.PublishMsg(m); err != nil {
					t.Fatalf("publish %s reply %s (%s): %v", subj, reply, body.name, err)
				}
				sent++
			}
		}
	}
	// A barrier: A's own report to each report stream and its direct get
	// come after every injected message on the same connection and the same
	// paths. A report is never acknowledged: it is waited for until the
	// control plane reads it stored, so each stream has taken or refused
	// every injected report before it; the direct get is answered on A's
	// own inbox. So every answer JetStream sent for them has been routed.
	// A barrier that fails is reported, and the comparison still runs: on a
	// server where the injection worked, the streams it would use are gone.
	for range 2 {
		for _, k := range []events.ReportKind{events.ReportWorkload, events.ReportHeartbeat} {
			s, _ := events.ReportSubject("dev-a", k)
			if _, err := natstest.PublishAndAwait(a.Conn, e.admin, &nats.Msg{Subject: s, Data: []byte(`{"barrier":true}`)}); err != nil {
				t.Errorf("barrier report %s: %v", s, err)
			}
		}
		if _, err := a.Request(dg, nil, 10*time.Second); err != nil {
			t.Errorf("barrier direct get: %v", err)
		}
		if err := b.Flush(); err != nil {
			t.Errorf("device B's connection: %v", err)
		}
	}
	t.Logf("device A sent %d injected messages (%d subjects × %d reply targets × %d bodies)", sent, len(own), len(targets), len(injectionBodies))

	after := snapshotStreams(t, e.js)
	if diff := cmp.Diff(before, onlyOwnReports(before, after, "dev-a")); diff != "" {
		t.Errorf("the control plane changed outside A's own report subjects (-before +after):\n%s", diff)
	}
	mu.Lock()
	if len(reachedB) > 0 {
		t.Errorf("device B's subscriptions received %d messages from A, e.g. %s", len(reachedB), strings.Join(reachedB[:min(5, len(reachedB))], "; "))
	}
	reachedB = nil
	mu.Unlock()

	// B's two subscriptions work: the control plane's own intent change and
	// command reach it, exactly those (otherwise the check above proves
	// nothing).
	if _, err := e.intent.Put(ctx, "dev-b", []byte(`{"intent":"b2"}`)); err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Publish("fleet.command.dev-b", []byte(`{"command":"real"}`)); err != nil {
		t.Fatal(err)
	}
	want := []string{`fleet.command.dev-b: "{\"command\":\"real\"}"`, `fleet.notify.intent.dev-b: "{\"intent\":\"b2\"}"`}
	var got []string
	// On a timeout the diff below says what arrived.
	_ = testenv.Poll(ctx, 10*time.Second, func() bool {
		mu.Lock()
		got = slices.Clone(reachedB)
		mu.Unlock()
		slices.Sort(got)
		return len(got) >= len(want)
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("device B's subscriptions after the control plane's intent change and command (-want +got):\n%s", diff)
	}
	mu.Lock()
	defer mu.Unlock()
	// A's own reports arrived: the suite ran on a working path. (The
	// reports stream keeps history; every body but the one with hostile
	// JetStream headers and the oversized one, which the stream refuses,
	// is stored, and none over events.MaxReportSize, but for the
	// publishes whose reply the server itself refuses, such as $JS.ACK.*.)
	var stored int
	for _, m := range after[events.StreamReports] {
		if strings.HasPrefix(m.Subject, "fleet.report.dev-a.") {
			stored++
		}
	}
	for name, msgs := range after {
		for _, m := range msgs {
			if len(m.Data) > events.MaxReportSize {
				t.Errorf("%s holds a %d-byte message on %s, over the report streams' %d", name, len(m.Data), m.Subject, events.MaxReportSize)
			}
		}
	}
	stores := 0
	for _, b := range injectionBodies {
		if !b.oversized {
			stores++
		}
	}
	if want := 3 * len(targets) * (stores - 1); stored < want*9/10 {
		t.Errorf("only %d of A's %d history report publishes were stored: the injection did not run on the product's path", stored, want)
	}
}

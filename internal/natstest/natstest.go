// Package natstest starts an embedded JetStream server for tests (port -1, a
// temporary store), connects clients to it and stands in for devices
// (reports are never acknowledged: PublishStored, Report). Only tests import
// it (internal/hygiene checks).
package natstest

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
)

// Start runs a server on a free port with a temporary store and the fast
// sync policy; it is shut down when the test ends. Pass a store directory to
// restart a server on the same store; "" makes a new one.
func Start(tb testing.TB, storeDir string) *natsembed.Server {
	tb.Helper()
	return StartWith(tb, natsembed.Options{StoreDir: storeDir, Sync: natsembed.FastSync})
}

// StartWith runs a server with o (Port -1 and a temporary store by default).
func StartWith(tb testing.TB, o natsembed.Options) *natsembed.Server {
	tb.Helper()
	if o.StoreDir == "" {
		o.StoreDir = tb.TempDir()
	}
	if o.Port == 0 {
		o.Port = -1
	}
	s, err := natsembed.Start(o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Shutdown)
	return s
}

// Connect connects a client, closed when the test ends.
func Connect(tb testing.TB, s *natsembed.Server, opts ...nats.Option) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// Provisioned starts a server, provisions the Fleet streams and buckets and
// returns a store on a fresh connection.
func Provisioned(tb testing.TB) (*natsembed.Server, *events.Store) {
	tb.Helper()
	s := Start(tb, "")
	nc := Connect(tb, s)
	st, err := events.NewStore(nc, events.StoreOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := events.Provision(ctx, st.JetStream(), events.ProvisionOptions{}); err != nil {
		tb.Fatal(err)
	}
	return s, st
}

// StoreWait bounds each step of PublishStored: the reads before the
// publish, the publish and flush, and the wait for each stream.
const StoreWait = 10 * time.Second

// PublishStored publishes msgs on nc as a device does (core publishes: the
// report and telemetry streams never acknowledge), flushes, and waits until
// the last message sent to each stream is stored, by polling a direct get
// of the last message on its subject (no fixed sleep). It returns the
// stream sequence of the last message of msgs and fails the test if it is
// not stored within StoreWait.
//
// One connection's messages reach a stream in the order they were sent, so
// once the last one sent to a stream is stored, the earlier ones were
// stored or refused: a flood is confirmed by its last message only. nc must
// be allowed to direct-get the streams (a control-plane connection); for a
// device's connection, use PublishStoredVia. See PublishAndAwait for what
// counts as stored and the limits.
func PublishStored(tb testing.TB, nc *nats.Conn, msgs ...*nats.Msg) uint64 {
	tb.Helper()
	seq, err := PublishAndAwait(nc, nc, msgs...)
	if err != nil {
		tb.Fatal(err)
	}
	return seq
}

// PublishStoredVia is PublishStored with the messages published on pub
// (a device's connection, say) and the streams read on read (a connection
// that may direct-get them: the control plane's).
func PublishStoredVia(tb testing.TB, pub, read *nats.Conn, msgs ...*nats.Msg) uint64 {
	tb.Helper()
	seq, err := PublishAndAwait(pub, read, msgs...)
	if err != nil {
		tb.Fatal(err)
	}
	return seq
}

// PublishAndAwait is PublishStoredVia returning an error instead of failing
// the test (for a caller that reports and goes on, or a goroutine other
// than the test's).
//
// A message counts as stored when the last message on its subject, read by
// a direct get, carries its payload at a sequence after the subject's last
// one before the publish (read before publishing); the sequence is the
// last Nats-Sequence header of the answer (a stored message keeps its
// publisher's headers, a device's may be anything, and the server's come
// after them). So an identical payload stored earlier on the subject is
// told apart, but not one stored there concurrently by another publisher.
// Its limits: a message that is never stored (refused by the stream, or
// dropped as a duplicate Nats-Msg-Id) and one that a later message on the
// same subject hides before a poll sees it are errors after StoreWait,
// never a pass; publish on a subject one call at a time, from one
// publisher. msgs must be on subjects of provisioned Fleet streams
// (events.StreamOf), without wildcards.
func PublishAndAwait(pub, read *nats.Conn, msgs ...*nats.Msg) (uint64, error) {
	if len(msgs) == 0 {
		return 0, fmt.Errorf("natstest: publish of no message")
	}
	step := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), StoreWait)
	}
	// The last message to each stream, and its subject's last sequence
	// before the publish.
	type await struct {
		m      *nats.Msg
		stream string
		before uint64
	}
	lastOf := map[string]int{}
	var order []string
	for i, m := range msgs {
		stream, err := events.StreamOf(m.Subject)
		if err != nil {
			return 0, fmt.Errorf("natstest: publish on %s: %w", m.Subject, err)
		}
		if _, ok := lastOf[stream]; !ok {
			order = append(order, stream)
		}
		lastOf[stream] = i
	}
	awaits := make([]await, 0, len(order))
	ctx, cancel := step()
	defer cancel()
	for _, stream := range order {
		m := msgs[lastOf[stream]]
		seq, _, err := directLast(ctx, read, stream, m.Subject)
		if err != nil {
			return 0, fmt.Errorf("natstest: the last message on %s before the publish: %w", m.Subject, err)
		}
		awaits = append(awaits, await{m: m, stream: stream, before: seq})
	}
	for i, m := range msgs {
		if err := pub.PublishMsg(m); err != nil {
			return 0, fmt.Errorf("natstest: publish %d of %d on %s: %w", i+1, len(msgs), m.Subject, err)
		}
	}
	fctx, fcancel := step()
	defer fcancel()
	if err := pub.FlushWithContext(fctx); err != nil {
		return 0, fmt.Errorf("natstest: flush after publishing %d messages: %w", len(msgs), err)
	}
	var seq uint64
	for _, a := range awaits {
		actx, acancel := step()
		s, err := awaitStored(actx, read, a.stream, a.m, a.before)
		acancel()
		if err != nil {
			return 0, err
		}
		if a.m == msgs[len(msgs)-1] {
			seq = s
		}
	}
	return seq, nil
}

// awaitStored polls the last message on m.Subject until it is m's payload
// at a sequence after before, and returns that sequence.
func awaitStored(ctx context.Context, read *nats.Conn, stream string, m *nats.Msg, before uint64) (uint64, error) {
	wait := time.Millisecond
	for {
		seq, data, err := directLast(ctx, read, stream, m.Subject)
		if err == nil && seq > before && bytes.Equal(data, m.Data) {
			return seq, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("natstest: a %d-byte message on %s was not stored within %s (nothing acknowledges a report: refused by the stream, a duplicate, or hidden by a later message?); last seen: sequence %d (%d before the publish), error %v",
				len(m.Data), m.Subject, StoreWait, seq, before, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// directLast direct-gets the last message on subject of stream: its
// sequence and payload, or 0 and nil when the subject has none. The
// sequence is the last Nats-Sequence header: a stored message keeps its
// publisher's headers (a device's: anything) and the server's come after
// them (as events.Store.Last reads them).
func directLast(ctx context.Context, nc *nats.Conn, stream, subject string) (uint64, []byte, error) {
	m, err := nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subject, nil)
	if err != nil {
		return 0, nil, err
	}
	seqs := m.Header.Values(jetstream.SequenceHeader)
	if len(seqs) == 0 {
		if m.Header.Get("Status") == "404" {
			return 0, nil, nil
		}
		return 0, nil, fmt.Errorf("direct get on %s: server answered %s %s", subject, m.Header.Get("Status"), m.Header.Get("Description"))
	}
	seq, err := strconv.ParseUint(seqs[len(seqs)-1], 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("direct get on %s: sequence %q: %w", subject, seqs[len(seqs)-1], err)
	}
	if subs := m.Header.Values(jetstream.SubjectHeader); len(subs) == 0 || subs[len(subs)-1] != subject {
		return 0, nil, fmt.Errorf("direct get on %s: the server answered for subject %v", subject, subs)
	}
	return seq, m.Data, nil
}

// Report reports evs as a stand-in device (events.Store.Report: core
// publishes, waited for until stored) and returns the stored record of the
// last one. Report returns once the last report sent to each stream is its
// subject's last record, so that record is read back by a direct get; a
// concurrent report on the same subject fails the test. ctx needs a
// deadline.
func Report(tb testing.TB, ctx context.Context, st *events.Store, evs ...events.Event) events.Record {
	tb.Helper()
	if len(evs) == 0 {
		tb.Fatal("natstest: Report of no event")
	}
	if err := st.Report(ctx, evs...); err != nil {
		tb.Fatal(err)
	}
	last := evs[len(evs)-1]
	subject, err := last.Subject()
	if err != nil {
		tb.Fatal(err)
	}
	rec, err := st.Last(ctx, subject)
	if err != nil {
		tb.Fatalf("natstest: the report just stored on %s: %v", subject, err)
	}
	if rec.Event.ID != last.ID {
		tb.Fatalf("natstest: the last record on %s is %s, not the report %s just stored (a concurrent report on the subject?)", subject, rec.Event.ID, last.ID)
	}
	return rec
}

// DeviceWritten reports whether subject belongs to a stream only devices
// write (events.StreamReports, events.StreamTelemetry): one that never
// acknowledges, which Append refuses (events.ErrDeviceWritten).
func DeviceWritten(subject string) bool {
	stream, err := events.StreamOf(subject)
	return err == nil && (stream == events.StreamReports || stream == events.StreamTelemetry || stream == events.StreamLiveness)
}

// Write stores ev as its writer does and returns where: a device's report
// through Report (a stand-in device: never acknowledged, read back once
// stored), any other event through Append (the control plane,
// acknowledged). Position.Duplicate is never set for a report. ctx needs a
// deadline.
func Write(tb testing.TB, ctx context.Context, st *events.Store, ev events.Event) events.Position {
	tb.Helper()
	subject, err := ev.Subject()
	if err != nil {
		tb.Fatal(err)
	}
	if DeviceWritten(subject) {
		rec := Report(tb, ctx, st, ev)
		return events.Position{Stream: rec.Stream, Sequence: rec.Sequence}
	}
	p, err := st.Append(ctx, ev)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// ExposureIndex returns every record of the exposure index stream, in
// order: what a rebuild or a second writer is compared against.
func ExposureIndex(tb testing.TB, ctx context.Context, st *events.Store) []events.IndexRecord {
	tb.Helper()
	last, err := st.IndexLastSequence(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	var out []events.IndexRecord
	for r, err := range st.ReplayIndex(ctx, []string{events.ExposureIndexSubjects}, 0, last) {
		if err != nil {
			tb.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

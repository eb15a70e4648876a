package authcallout_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
)

// A reader id and a request id (ADR 0025).
const (
	logsReader  = "0123456789abcdef0123456789abcdef"
	logsRequest = "fedcba9876543210fedcba9876543210"
)

// TestALogsAnswerReachesOnlyItsOwnRequest: a device's answer on its own
// logs subject reaches the control plane's subscriber of exactly that
// request; device B answering A's request id (on its own device token,
// the only one it may publish) never reaches the subscriber of A's
// request, and nothing B publishes reaches a subscriber of A's subjects.
func TestALogsAnswerReachesOnlyItsOwnRequest(t *testing.T) {
	e := newEnv(t, envOptions{})
	srcA := e.device(t, "dev-a", false)
	srcB := e.device(t, "dev-b", false)
	a, err := e.connect("dev-a", srcA, "")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := e.connect("dev-b", srcB, "")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	aFilter, _ := events.LogsReaderFilter("dev-a", logsReader)
	sub, err := e.admin.SubscribeSync(aFilter)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.admin.Flush(); err != nil {
		t.Fatal(err)
	}
	aSubj, _ := events.LogsSubject("dev-a", logsReader, logsRequest)
	bSubj, _ := events.LogsSubject("dev-b", logsReader, logsRequest)
	// B answers A's request with B's own token: allowed to publish, but
	// it is B's subject.
	if err := b.Publish(bSubj, []byte(`{"seq":1,"lines":[{"l":"forged"}]}`)); err != nil {
		t.Fatal(err)
	}
	b.noViolation(t)
	if err := a.Publish(aSubj, []byte(`{"seq":1,"lines":[{"l":"real"}]}`)); err != nil {
		t.Fatal(err)
	}
	a.noViolation(t)
	m, err := sub.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatalf("A's answer did not reach the control plane: %v", err)
	}
	if m.Subject != aSubj || string(m.Data) != `{"seq":1,"lines":[{"l":"real"}]}` {
		t.Fatalf("the subscriber of A's request got %s %q, want A's answer", m.Subject, m.Data)
	}
	// Both were published before A's answer was flushed; B's went first,
	// so had it reached the subscriber it would have come first. Nothing
	// else is waiting.
	if m, err := sub.NextMsg(100 * time.Millisecond); err != nats.ErrTimeout {
		t.Fatalf("the subscriber of A's request got another message: %v %v", m, err)
	}
}

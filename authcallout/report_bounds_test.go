package authcallout_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
)

// TestAnOversizedReportFromADeviceIsStoredNowhere: through a real device
// connection (the callout, the DEVICES account and its 128 KiB
// max_payload), a report over events.MaxReportSize on each of the device's
// report subjects is refused by its stream and stored nowhere, the device
// stays connected, and its next report is stored.
func TestAnOversizedReportFromADeviceIsStoredNowhere(t *testing.T) {
	e := newEnv(t, envOptions{})
	src := e.device(t, "dev-a", false)
	c, err := e.connect("dev-a", src, "")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before := snapshotStreams(t, e.js)
	var refused int
	for _, kind := range authcallout.ReportKinds {
		subject, err := events.ReportSubject("dev-a", kind)
		if err != nil {
			t.Fatal(err)
		}
		base, err := events.New(events.Keys{Device: "dev-a"}, events.DeviceHeartbeat{AgentVersion: "v1"})
		if err != nil {
			t.Fatal(err)
		}
		var msgs []*nats.Msg
		for _, tc := range poisontest.Oversized(t, base) {
			msgs = append(msgs, &nats.Msg{Subject: subject, Data: tc.Payload})
			refused++
		}
		// In order on the device's connection: once the last is stored,
		// the oversized ones before it were stored or refused.
		msgs = append(msgs, &nats.Msg{Subject: subject, Data: fmt.Appendf(nil, "after the oversized %s reports", kind)})
		natstest.PublishStoredVia(t, c.Conn, e.admin, msgs...)
	}
	c.noViolation(t)
	if !c.IsConnected() {
		t.Fatalf("the device was disconnected: %v", c.LastError())
	}
	after := snapshotStreams(t, e.js)
	if diff := cmp.Diff(before, onlyOwnReports(before, after, "dev-a")); diff != "" {
		t.Errorf("the control plane changed outside the device's own report subjects (-before +after):\n%s", diff)
	}
	var added []string
	for name, msgs := range after {
		known := map[uint64]bool{}
		for _, m := range before[name] {
			known[m.Seq] = true
		}
		for i, m := range msgs {
			if i == 0 && (name == events.StreamReports || name == events.StreamTelemetry || name == events.StreamLiveness) || known[m.Seq] || m.Subject == "deleted" {
				continue // the state line, or a message stored before
			}
			added = append(added, fmt.Sprintf("%s %s: %d bytes", name, m.Subject, len(m.Data)))
		}
	}
	for name, msgs := range after {
		for _, m := range msgs {
			if len(m.Data) > events.MaxReportSize {
				t.Errorf("%s holds a %d-byte message on %s", name, len(m.Data), m.Subject)
			}
		}
	}
	if want := len(authcallout.ReportKinds); len(added) != want {
		t.Errorf("the streams gained %d messages after %d oversized and %d small reports, want the %d small ones:\n%s", len(added), refused,
			want, want, strings.Join(added, "\n"))
	}
}

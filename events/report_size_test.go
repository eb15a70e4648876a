package events_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// TestTheStreamsDevicesWriteRefuseAReportOverMaxReportSize: a report
// larger than MaxReportSize is stored nowhere, on a stream provisioned
// fresh and on one an earlier build provisioned with the 1 MiB limit (the
// next Provision lowers it), while one of MaxReportData is stored.
func TestTheStreamsDevicesWriteRefuseAReportOverMaxReportSize(t *testing.T) {
	for _, upgraded := range []bool{false, true} {
		t.Run(fmt.Sprintf("upgraded from a 1 MiB limit: %v", upgraded), func(t *testing.T) {
			ctx := testContext(t)
			s := natstest.StartWith(t, natsembed.Options{StoreDir: t.TempDir(), Sync: natsembed.FastSync})
			st, err := events.NewStore(natstest.Connect(t, s), events.StoreOptions{})
			if err != nil {
				t.Fatal(err)
			}
			js := st.JetStream()
			if upgraded {
				for _, c := range events.StreamConfigs(events.ProvisionOptions{}) {
					c.MaxMsgSize = events.MaxEventSize // an earlier build's streams
					if _, err := js.CreateStream(ctx, c); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := events.Provision(ctx, js, events.ProvisionOptions{}); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{events.StreamReports, events.StreamTelemetry} {
				s, err := js.Stream(ctx, name)
				if err != nil {
					t.Fatal(err)
				}
				if got := s.CachedInfo().Config.MaxMsgSize; got != events.MaxReportSize {
					t.Errorf("%s max_msg_size %d, want %d", name, got, events.MaxReportSize)
				}
			}
			for _, subject := range []string{"fleet.report.d1.workload", "fleet.report.d1.task", "fleet.report.d1.command",
				"fleet.report.d1.heartbeat", "fleet.report.d1.inventory"} {
				big := &nats.Msg{Subject: subject, Data: bytes.Repeat([]byte("x"), events.MaxReportSize+1)}
				ok := &nats.Msg{Subject: subject, Data: bytes.Repeat([]byte("y"), events.MaxReportData)}
				// In order on one connection: once the last is stored, the
				// big one before it was stored or refused.
				natstest.PublishStored(t, js.Conn(), big, ok)
				stream, _ := events.StreamOf(subject)
				s, err := js.Stream(ctx, stream)
				if err != nil {
					t.Fatal(err)
				}
				info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
				if err != nil {
					t.Fatal(err)
				}
				if got := info.State.Subjects[subject]; got != 1 {
					t.Errorf("%s holds %d messages after a %d-byte and a %d-byte report, want only the second", subject, got,
						events.MaxReportSize+1, events.MaxReportData)
				}
			}
		})
	}
}

// TestTheDocumentedPerDeviceWorstCaseIsTheConfiguredOne computes what one
// device can hold in the streams it writes from the default stream
// configuration (subjects per device × messages kept per subject × the
// largest message) and checks docs/security.md states those figures.
func TestTheDocumentedPerDeviceWorstCaseIsTheConfiguredOne(t *testing.T) {
	doc, err := os.ReadFile("../docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	figures := map[string]string{}
	for _, c := range events.StreamConfigs(events.ProvisionOptions{}) {
		if c.Name != events.StreamReports && c.Name != events.StreamTelemetry && c.Name != events.StreamLiveness {
			continue
		}
		if c.MaxMsgSize <= 0 || c.MaxMsgsPerSubject <= 0 {
			t.Fatalf("%s keeps %d messages of %d bytes per subject: unbounded per device", c.Name, c.MaxMsgsPerSubject, c.MaxMsgSize)
		}
		for _, subj := range c.Subjects {
			if strings.Count(subj, "*") != 1 {
				t.Fatalf("%s subject %s is not one per device", c.Name, subj)
			}
		}
		bytes := int64(len(c.Subjects)) * c.MaxMsgsPerSubject * int64(c.MaxMsgSize)
		total += bytes
		size := fmt.Sprintf("%d KiB", c.MaxMsgSize>>10)
		held := fmt.Sprintf("%s KiB", thousands(bytes>>10))
		if bytes >= 1<<20 {
			held = fmt.Sprintf("%s MiB", thousands(bytes>>20))
		}
		figures[c.Name] = fmt.Sprintf("%d × %s × %s = %s", len(c.Subjects), thousands(c.MaxMsgsPerSubject), size, held)
	}
	figures["total"] = fmt.Sprintf("at most %.2f GiB per device", float64(total)/(1<<30))
	figures["size"] = fmt.Sprintf("%d KiB (`events.MaxReportSize`", events.MaxReportSize>>10)
	for what, want := range figures {
		if !strings.Contains(string(doc), want) {
			t.Errorf("docs/security.md does not state the %s figure %q", what, want)
		}
	}
}

func thousands(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

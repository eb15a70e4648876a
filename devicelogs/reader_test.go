package devicelogs_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
)

// TestAnAnswerIsReadInOrderAndTheRequestAudited: the device's chunks come
// out in order, the stream ends at the device's end, and the audit
// record names who, which device and service.
func TestAnAnswerIsReadInOrderAndTheRequestAudited(t *testing.T) {
	c := startChain(t)
	c.device(t, "dev-a", func(nc *nats.Conn, lr events.LogsRequest) {
		send(t, nc, "dev-a", lr, events.LogsChunk{Seq: 1, Sent: time.Now(), Lines: lines(2, "line %d")})
		send(t, nc, "dev-a", lr, events.LogsChunk{Seq: 2, Sent: time.Now(), Lines: lines(1, "last %d"), End: true})
	}, nil)
	rd := c.reader(t, devicelogs.Options{})
	r := request("dev-a")
	r.Tail = 10
	s, err := rd.Open(context.Background(), r, allow)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := readAll(t, s)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"line 0", "line 1", "last 0"}, got); diff != "" {
		t.Fatalf("lines (-want +got):\n%s", diff)
	}
	want := []events.DeviceLogsRequested{{Namespace: "lab", Deployment: "analysis-api", Service: "web", User: "ada", Via: events.ViaCLI,
		Request: s.Request(), Tail: 10, Allowed: true}}
	if diff := cmp.Diff(want, c.auditOf(t, "dev-a")); diff != "" {
		t.Fatalf("audit (-want +got):\n%s", diff)
	}
}

// TestHostileAnswersAreCutOff: every way a device can break the path's
// bounds ends the stream with the bound's reason, counted.
func TestHostileAnswersAreCutOff(t *testing.T) {
	c := startChain(t)
	big := strings.Repeat("x", 70<<10)
	tests := []struct {
		name   string
		opts   devicelogs.Options
		answer func(t *testing.T, nc *nats.Conn, device string, lr events.LogsRequest)
		reason string
	}{
		{"a chunk out of sequence is cut off", devicelogs.Options{}, func(t *testing.T, nc *nats.Conn, d string, lr events.LogsRequest) {
			send(t, nc, d, lr, events.LogsChunk{Seq: 1, Lines: lines(1, "%d")})
			send(t, nc, d, lr, events.LogsChunk{Seq: 3, Lines: lines(1, "%d")})
		}, devicelogs.ReasonSequence},
		{"a chunk replayed is cut off", devicelogs.Options{}, func(t *testing.T, nc *nats.Conn, d string, lr events.LogsRequest) {
			send(t, nc, d, lr, events.LogsChunk{Seq: 1, Lines: lines(1, "%d")})
			send(t, nc, d, lr, events.LogsChunk{Seq: 1, Lines: lines(1, "%d")})
		}, devicelogs.ReasonSequence},
		{"a chunk that is not JSON is cut off", devicelogs.Options{}, func(t *testing.T, nc *nats.Conn, d string, lr events.LogsRequest) {
			subj, _ := events.LogsSubject(d, lr.Reader, lr.Request)
			_ = nc.Publish(subj, []byte("\x1b[2J not json"))
		}, devicelogs.ReasonDecode},
		{"a chunk with fields the contract does not have is cut off", devicelogs.Options{}, func(t *testing.T, nc *nats.Conn, d string, lr events.LogsRequest) {
			subj, _ := events.LogsSubject(d, lr.Reader, lr.Request)
			_ = nc.Publish(subj, []byte(`{"seq":1,"command":"rm -rf /"}`))
		}, devicelogs.ReasonDecode},
		{"a chunk over 64 KiB is cut off", devicelogs.Options{}, func(t *testing.T, nc *nats.Conn, d string, lr events.LogsRequest) {
			send(t, nc, d, lr, events.LogsChunk{Seq: 1, Lines: []events.LogLine{{Text: big}}})
		}, devicelogs.ReasonSize},
		{"a flood past the rate bound is cut off", devicelogs.Options{Rate: 64 << 10, Burst: 128 << 10},
			func(t *testing.T, nc *nats.Conn, d string, lr events.LogsRequest) {
				for i := range 64 {
					send(t, nc, d, lr, events.LogsChunk{Seq: uint64(i + 1), Lines: []events.LogLine{{Text: big[:60<<10]}}})
				}
			}, devicelogs.ReasonRate},
		{"a stream past the byte bound is cut off", devicelogs.Options{MaxBytes: 200 << 10},
			func(t *testing.T, nc *nats.Conn, d string, lr events.LogsRequest) {
				for i := range 8 {
					send(t, nc, d, lr, events.LogsChunk{Seq: uint64(i + 1), Lines: []events.LogLine{{Text: big[:60<<10]}}})
				}
			}, devicelogs.ReasonBytes},
		{"a chunk for a request id nobody asked cuts the device off", devicelogs.Options{},
			func(t *testing.T, nc *nats.Conn, d string, lr events.LogsRequest) {
				forged := lr
				forged.Request = strings.Repeat("0", 32)
				send(t, nc, d, forged, events.LogsChunk{Seq: 1, Lines: lines(1, "unasked %d")})
			}, devicelogs.ReasonUnrequested},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			device := fmt.Sprintf("hostile-%d", i)
			stops := make(chan events.LogsRequest, 4)
			c.device(t, device, func(nc *nats.Conn, lr events.LogsRequest) { tc.answer(t, nc, device, lr) }, stops)
			m := devicelogs.NewMetrics()
			tc.opts.Metrics = m
			rd := c.reader(t, tc.opts)
			r := request(device)
			r.Follow = true
			s, err := rd.Open(context.Background(), r, allow)
			if err != nil {
				t.Fatal(err)
			}
			_, err = readAll(t, s)
			var cut *devicelogs.CutOffError
			if !errors.As(err, &cut) || cut.Reason != tc.reason || !errors.Is(err, devicelogs.ErrCutOff) {
				t.Fatalf("stream ended with %v, want a cut-off for %s", err, tc.reason)
			}
			if got := m.CutOffs(tc.reason); got != 1 {
				t.Errorf("%s counted %v times, want 1", tc.reason, got)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case stop := <-stops:
				if stop.Request != s.Request() {
					t.Errorf("logs-stop names request %s, want %s", stop.Request, s.Request())
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the device was not asked to stop")
			}
		})
	}
}

// TestADeviceAnsweringAnotherDevicesRequestIsRefused: device B learns A's
// request id and answers it; it may publish only under its own device
// token, so A's stream gets only A's lines, and B's answer, arriving on B's
// subscription for a request B was not asked, cuts B off.
func TestADeviceAnsweringAnotherDevicesRequestIsRefused(t *testing.T) {
	c := startChain(t)
	asked := make(chan events.LogsRequest, 1)
	release := make(chan struct{})
	c.device(t, "dev-a", func(nc *nats.Conn, lr events.LogsRequest) {
		asked <- lr
		<-release
		send(t, nc, "dev-a", lr, events.LogsChunk{Seq: 1, Lines: lines(1, "a says %d"), End: true})
	}, nil)
	b := c.device(t, "dev-b", func(nc *nats.Conn, lr events.LogsRequest) {}, nil)
	m := devicelogs.NewMetrics()
	rd := c.reader(t, devicelogs.Options{Metrics: m})
	sa, err := rd.Open(context.Background(), request("dev-a"), allow)
	if err != nil {
		t.Fatal(err)
	}
	defer sa.Close()
	rb := request("dev-b")
	rb.Follow = true
	sb, err := rd.Open(context.Background(), rb, allow)
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	lr := <-asked
	// B answers A's request with B's token (the only one it may use)…
	send(t, b, "dev-b", lr, events.LogsChunk{Seq: 1, Lines: lines(1, "b forges %d"), End: true})
	// …and with A's token, which the server refuses.
	aSubj, _ := events.LogsSubject("dev-a", lr.Reader, lr.Request)
	_ = b.Publish(aSubj, []byte(`{"seq":1,"lines":[{"l":"b forges on a"}],"end":true}`))
	_, errB := readAll(t, sb)
	var cut *devicelogs.CutOffError
	if !errors.As(errB, &cut) || cut.Reason != devicelogs.ReasonUnrequested || cut.Device != "dev-b" {
		t.Fatalf("B's stream ended with %v, want B cut off for an unrequested answer", errB)
	}
	close(release)
	got, err := readAll(t, sa)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"a says 0"}, got); diff != "" {
		t.Fatalf("A's lines (-want +got):\n%s", diff)
	}
	if n := m.CutOffs(devicelogs.ReasonUnrequested); n != 1 {
		t.Fatalf("unrequested counted %v times, want 1", n)
	}
}

// TestSilenceIsSaidPlainly: a device that never answers, and one that
// stops answering while followed, end the stream with errors that say so.
func TestSilenceIsSaidPlainly(t *testing.T) {
	c := startChain(t)
	c.device(t, "mute", nil, nil)
	c.device(t, "gone", func(nc *nats.Conn, lr events.LogsRequest) {
		send(t, nc, "gone", lr, events.LogsChunk{Seq: 1, Lines: lines(1, "hello %d")})
	}, nil)
	rd := c.reader(t, devicelogs.Options{AnswerTimeout: 500 * time.Millisecond, KeepAlive: 200 * time.Millisecond})
	tests := []struct {
		device string
		want   error
		text   string
	}{
		{"mute", devicelogs.ErrNoAnswer, "the device did not answer"},
		{"gone", devicelogs.ErrDeviceGone, "the device stopped answering"},
	}
	for _, tc := range tests {
		t.Run("a device that "+map[string]string{"mute": "never answers", "gone": "goes silent while followed"}[tc.device], func(t *testing.T) {
			r := request(tc.device)
			r.Follow = true
			s, err := rd.Open(context.Background(), r, allow)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, err = readAll(t, s)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) || !strings.Contains(err.Error(), "lab/"+tc.device) {
				t.Fatalf("stream ended with %v, want %v naming the device", err, tc.want)
			}
		})
	}
}

// TestARefusedReaderIsAuditedAndTheDeviceNeverAsked: a refusal is
// recorded with its reason, and no command reaches the device.
func TestARefusedReaderIsAuditedAndTheDeviceNeverAsked(t *testing.T) {
	c := startChain(t)
	asked := make(chan events.LogsRequest, 1)
	c.device(t, "dev-a", func(nc *nats.Conn, lr events.LogsRequest) { asked <- lr }, nil)
	rd := c.reader(t, devicelogs.Options{})
	deny := devicelogs.AuthorizerFunc(func(_ context.Context, r devicelogs.Request) error {
		return fmt.Errorf("%w: %s may not", devicelogs.ErrDenied, r.Who.User)
	})
	r := request("dev-a")
	r.Who.User = "grace"
	if _, err := rd.Open(context.Background(), r, deny); !errors.Is(err, devicelogs.ErrDenied) {
		t.Fatalf("Open = %v, want ErrDenied", err)
	}
	got := c.auditOf(t, "dev-a")
	want := []events.DeviceLogsRequested{{Namespace: "lab", Deployment: "analysis-api", Service: "web", User: "grace", Via: events.ViaCLI,
		Allowed: false, Reason: "not allowed to read this device's logs: grace may not"}}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(events.DeviceLogsRequested{}, "Request")); diff != "" {
		t.Fatalf("audit (-want +got):\n%s", diff)
	}
	cmdSubj, _ := events.CommandSubject("dev-a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for rec, err := range c.Store.Replay(ctx, cmdSubj, events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		t.Fatalf("a command was appended for a refused reader: %s", rec.Event.Type)
	}
	select {
	case lr := <-asked:
		t.Fatalf("the device was asked: %+v", lr)
	default:
	}
}

// TestOneReaderOpensAtMostNStreamsOfADevice: the fifth stream of a device
// is refused (and audited); closing one makes room.
func TestOneReaderOpensAtMostNStreamsOfADevice(t *testing.T) {
	c := startChain(t)
	c.device(t, "dev-a", nil, nil)
	rd := c.reader(t, devicelogs.Options{MaxStreamsPerDevice: 2})
	var open []*devicelogs.Stream
	for range 2 {
		s, err := rd.Open(context.Background(), request("dev-a"), allow)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, s)
	}
	if _, err := rd.Open(context.Background(), request("dev-a"), allow); !errors.Is(err, devicelogs.ErrTooManyStreams) {
		t.Fatalf("third Open = %v, want ErrTooManyStreams", err)
	}
	if err := open[0].Close(); err != nil {
		t.Fatal(err)
	}
	s, err := rd.Open(context.Background(), request("dev-a"), allow)
	if err != nil {
		t.Fatalf("Open after a Close: %v", err)
	}
	defer s.Close()
	defer open[1].Close()
	audit := c.auditOf(t, "dev-a")
	if len(audit) != 4 || audit[2].Allowed || !strings.Contains(audit[2].Reason, "too many") {
		t.Fatalf("audit of the refused third stream: %+v", audit)
	}
}

func TestBadRequestsNameTheField(t *testing.T) {
	c := startChain(t)
	rd := c.reader(t, devicelogs.Options{})
	tests := []struct {
		name   string
		change func(*devicelogs.Request)
		want   string
	}{
		{"a device with a wildcard", func(r *devicelogs.Request) { r.Device = "*" }, "device"},
		{"no service", func(r *devicelogs.Request) { r.Service = "" }, "service"},
		{"a negative tail", func(r *devicelogs.Request) { r.Tail = -3 }, "tail"},
		{"nobody named", func(r *devicelogs.Request) { r.Who.User = "" }, "who"},
	}
	for _, tc := range tests {
		t.Run(tc.name+" is refused naming the field", func(t *testing.T) {
			r := request("dev-a")
			tc.change(&r)
			_, err := rd.Open(context.Background(), r, allow)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want an error naming %s", err, tc.want)
			}
		})
	}
	if _, err := devicelogs.New(devicelogs.Options{}); err == nil || !strings.Contains(err.Error(), "Options.Conn") {
		t.Fatalf("New without a connection = %v", err)
	}
}

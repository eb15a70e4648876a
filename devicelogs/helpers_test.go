package devicelogs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
)

// chain is the authentication chain of the tests: a control plane on the
// documented NATS configuration, with devices in the DEVICES account.
type chain struct {
	*callouttest.Env
}

func startChain(t *testing.T) chain {
	t.Helper()
	return chain{callouttest.Start(t)}
}

// device connects a device (account DEVICES, its own permissions) that
// answers every logs command with answer; logs-stop commands go to
// stops. It returns the device's connection.
func (c chain) device(t *testing.T, id string, answer func(nc *nats.Conn, lr events.LogsRequest), stops chan<- events.LogsRequest) *nats.Conn {
	t.Helper()
	src := c.Machine(t, "device-"+id)
	v, err := events.IdentityEntry{Device: id}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Identity.Put(context.Background(), src.Subject(), v); err != nil {
		t.Fatal(err)
	}
	nc := callouttest.ConnectAs(t, c.NATS, id, src, nats.CustomInboxPrefix(authcallout.InboxPrefix(id)))
	subj, _ := events.CommandSubject(id)
	if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
		ev, err := events.DecodeStored(m.Subject, m.Data)
		if err != nil {
			return
		}
		cmd, err := events.Decode[events.AgentCommand](ev)
		if err != nil || cmd.Logs == nil {
			return
		}
		switch cmd.Command {
		case events.CommandLogs:
			if answer != nil {
				go answer(nc, *cmd.Logs)
			}
		case events.CommandLogsStop:
			if stops != nil {
				stops <- *cmd.Logs
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return nc
}

// send publishes chunk as device's answer to lr. It runs in the stand-in
// device's goroutine, which may outlive its test: errors (a closed
// connection) are ignored, as a hostile device would.
func send(_ *testing.T, nc *nats.Conn, device string, lr events.LogsRequest, c events.LogsChunk) {
	subj, err := events.LogsSubject(device, lr.Reader, lr.Request)
	if err != nil {
		return
	}
	b, _ := json.Marshal(c)
	_ = nc.Publish(subj, b)
}

// reader is a Reader on the chain's control-plane connection.
func (c chain) reader(t *testing.T, o devicelogs.Options) *devicelogs.Reader {
	t.Helper()
	o.Conn, o.Store = c.Admin, c.Store
	rd, err := devicelogs.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return rd
}

// allow authorizes every request.
var allow = devicelogs.AuthorizerFunc(func(context.Context, devicelogs.Request) error { return nil })

// request is a request of lab/<device>'s analysis-api/web by ada.
func request(device string) devicelogs.Request {
	return devicelogs.Request{Namespace: "lab", Device: device, Deployment: "analysis-api", Service: "web",
		Who: devicelogs.Who{User: "ada", Via: events.ViaCLI}}
}

// readAll reads s to its end: the lines' texts and the error that ended
// it (nil at io.EOF).
func readAll(t *testing.T, s *devicelogs.Stream) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out []string
	for {
		lines, err := s.Next(ctx)
		for _, l := range lines {
			out = append(out, l.Text)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

// auditOf returns the device.logs.requested records of device.
func (c chain) auditOf(t *testing.T, device string) []events.DeviceLogsRequested {
	t.Helper()
	subj, _ := events.DashboardDeviceSubject(device)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []events.DeviceLogsRequested
	for rec, err := range c.Store.Replay(ctx, subj, events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.Event.Type == events.TypeDeviceLogsRequested {
			d, err := events.Decode[events.DeviceLogsRequested](rec.Event)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
	}
	return out
}

func lines(n int, format string) []events.LogLine {
	out := make([]events.LogLine, n)
	for i := range out {
		out[i] = events.LogLine{Text: fmt.Sprintf(format, i)}
	}
	return out
}

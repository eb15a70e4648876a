package dashboardui

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/dashboard"
	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/browser"
)

// logsStandIn answers every device's logs commands on nc like an agent:
// three lines (one with a redacted secret, one with a terminal escape),
// then, when following, a line every 200 ms until asked to stop; and a
// diagnosis. stops receives the request ids asked to stop.
func logsStandIn(t *testing.T, nc *nats.Conn, stops chan<- string) {
	stopped := map[string]chan struct{}{}
	var mu = make(chan struct{}, 1)
	mu <- struct{}{}
	if _, err := nc.Subscribe("fleet.command.*", func(m *nats.Msg) {
		ev, err := events.DecodeStored(m.Subject, m.Data)
		if err != nil {
			return
		}
		cmd, err := events.Decode[events.AgentCommand](ev)
		if err != nil || cmd.Logs == nil {
			return
		}
		device := strings.TrimPrefix(m.Subject, "fleet.command.")
		to, _ := events.LogsSubject(device, cmd.Logs.Reader, cmd.Logs.Request)
		pub := func(c events.LogsChunk) {
			c.Sent = time.Now()
			b, _ := json.Marshal(c)
			_ = nc.Publish(to, b)
		}
		now := time.Now()
		switch cmd.Command {
		case events.CommandDiagnose:
			pub(events.LogsChunk{Seq: 1, End: true, Diagnosis: &events.DeviceDiagnosis{AgentVersion: "0.9.0", Engine: "podman 4.3.1",
				DiskFree: 3 << 30, DiskTotal: 10 << 30, MemAvailable: 512 << 20, MemTotal: 2 << 30,
				Containers: events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: "lab", Deployment: "analysis-api",
					Generation: 1, Containers: []events.ContainerState{{Name: "web", Role: "service", State: "running", ImageDigest: "sha256:abc"}}}}},
				Ports:  map[string][]string{"lab/analysis-api/web": {"8080:8080/tcp"}},
				Passes: []events.PassRecord{{At: now, Seconds: 0.2, Result: "converged"}}}})
		case events.CommandLogsStop:
			<-mu
			if ch, ok := stopped[cmd.Logs.Request]; ok {
				close(ch)
				delete(stopped, cmd.Logs.Request)
			}
			mu <- struct{}{}
			stops <- cmd.Logs.Request
		case events.CommandLogs:
			first := []events.LogLine{{Time: now, Text: "GET /api/analysis 200"}, {Time: now, Text: "connecting with password ***"},
				{Time: now, Text: "\x1b[2Jcleared"}}
			if !cmd.Logs.Follow {
				pub(events.LogsChunk{Seq: 1, Lines: first, End: true})
				return
			}
			stop := make(chan struct{})
			<-mu
			stopped[cmd.Logs.Request] = stop
			mu <- struct{}{}
			go func() {
				pub(events.LogsChunk{Seq: 1, Lines: first})
				tick := time.NewTicker(200 * time.Millisecond)
				defer tick.Stop()
				for seq := uint64(2); ; seq++ {
					select {
					case <-stop:
						return
					case at := <-tick.C:
						pub(events.LogsChunk{Seq: seq, Lines: []events.LogLine{{Time: at, Text: "GET /api/analysis/live 200"}}})
					}
				}
			}()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// TestTheLogsAndDiagnosisPagesPassAxe: on the mock dashboard with a real
// reader (embedded NATS, a stand-in agent), an admin reads a container's
// last lines, follows it live and pauses (the device is asked to stop),
// and opens the diagnosis; each page passes axe-core, escapes are shown,
// and every read is audited with the signed-in user.
func TestTheLogsAndDiagnosisPagesPassAxe(t *testing.T) {
	srv, st := natstest.Provisioned(t)
	stops := make(chan string, 8)
	logsStandIn(t, natstest.Connect(t, srv), stops)
	rd, err := devicelogs.New(devicelogs.Options{Conn: natstest.Connect(t, srv), Store: st})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	key := make([]byte, dashboard.SessionKeySize)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	dsrv, err := dashboard.New(dashboard.Options{PublicURL: url, SessionKey: key, Mock: true, MockSignIn: true,
		View: fleetview.Mock(1, 40), Actions: dashboard.NewMockActions(), Acks: dashboard.NewMemoryAcks(), Logs: rd})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dsrv.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("the dashboard stopped with %v", err)
		}
	})

	b := browser.Start(t)
	p := b.NewPage(t)
	p.Open(url + "/")
	p.WaitVisible("#role-admin")
	if status := p.ClickAndWaitLoad(`form[action="/login/mock"] button[type=submit]`); status != http.StatusOK {
		t.Fatalf("the mock admin got %d, want 200", status)
	}
	// A device with containers: one of the degraded Deployment's.
	p.Open(url + "/deployments/fleet/telemetry-collector")
	href := browser.Eval[string](p, `document.querySelector("#degraded li a").getAttribute("href")`)
	device := strings.TrimPrefix(href, "/devices/")
	p.Open(url + href)
	p.WaitText("#h-read", "Logs and diagnosis")
	if status := p.ClickAndWaitLoad(`a[href$="/logs"]`); status != http.StatusOK {
		t.Fatalf("the Logs page: %d", status)
	}
	p.WaitVisible("#logs-container")
	p.CheckAccessibility("the Logs page (mock, real reader)")

	if status := p.ClickAndWaitLoad(`#logs-form button[type=submit]`); status != http.StatusOK {
		t.Fatalf("reading the last lines: %d", status)
	}
	p.WaitText("#logs-status", "3 lines read")
	p.WaitText("#logs-lines", "connecting with password ***")
	p.WaitText("#logs-lines", `\x1b[2Jcleared`)
	p.CheckAccessibility("the Logs page with lines read")

	p.Click("#logs-follow")
	p.WaitText("#logs-status", "Following")
	p.WaitText("#logs-lines", "GET /api/analysis/live 200")
	p.CheckAccessibility("the Logs page following a log")
	p.Click("#logs-pause")
	p.WaitText("#logs-status", "Paused")
	select {
	case <-stops:
	case <-time.After(30 * time.Second):
		t.Fatal("pausing did not ask the device to stop")
	}

	if status := p.Open(url + href + "/diagnosis"); status != http.StatusOK {
		t.Fatalf("the Diagnosis page: %d", status)
	}
	p.WaitText("#diagnosis-host", "podman 4.3.1")
	p.WaitText("#diagnosis-containers", "8080:8080/tcp")
	p.CheckAccessibility("the Diagnosis page")

	subj, _ := events.DashboardDeviceSubject(device)
	testenv.Eventually(t, "three audited reads (read, follow, diagnose) by the mock admin", 30*time.Second, func() bool {
		n := 0
		for rec, err := range st.Replay(ctx, subj, events.FromStart()) {
			if err != nil {
				return false
			}
			if d, err := events.Decode[events.DeviceLogsRequested](rec.Event); err == nil && d.Allowed && d.Via == events.ViaDashboard && d.User != "" {
				n++
			}
		}
		return n == 3
	})
}

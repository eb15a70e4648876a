package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/score"
)

// printing is a simulated device whose private image prints lines,
// under an agent, with a devicelogs.Reader on its server.
func printing(t *testing.T, lines []string) (*agentEnv, *devicelogs.Reader) {
	w := newWorld(t, func(o *sim.Options) {
		prev := o.Behave
		o.Behave = func(spec runtime.ContainerSpec) sim.Behaviour {
			b := prev(spec)
			if spec.Image == privateImage {
				b.Output = lines
			}
			return b
		}
	})
	e := startAgentOn(t, w)
	e.put(entry(t, 1, score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: privateImage,
		ImagePullSecret: "hub-pull", SecretEnv: []score.SecretEnv{{Name: "DB_PASSWORD", Secret: "lab/db", Key: "password"}}}}}}))
	e.waitStatus(1, events.WorkloadConverged)
	rd, err := devicelogs.New(devicelogs.Options{Conn: natstest.Connect(t, e.srv), Store: e.st})
	if err != nil {
		t.Fatal(err)
	}
	return e, rd
}

// readLogs reads api's whole log.
func readLogs(t *testing.T, rd *devicelogs.Reader, change func(*devicelogs.Request)) ([]string, error) {
	r := devicelogs.Request{Namespace: "lab", Device: "d1", Deployment: "analysis", Service: "api",
		Who: devicelogs.Who{User: "ada", Via: events.ViaCLI}}
	if change != nil {
		change(&r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := rd.Open(ctx, r, devicelogs.AuthorizerFunc(func(context.Context, devicelogs.Request) error { return nil }))
	if err != nil {
		return nil, err
	}
	defer s.Close()
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

// TestLogsAreRedactedOfSecretsAndPullCredentials: what the container
// prints of its secret_env value and of its pull credential's password
// leaves the device as ***.
func TestLogsAreRedactedOfSecretsAndPullCredentials(t *testing.T) {
	e, rd := printing(t, []string{"db password " + secretValue, "pulled with pull-pass by puller", "ok"})
	got, err := readLogs(t, rd, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"db password ***", "pulled with *** by puller", "ok"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("lines (-want +got):\n%s", diff)
	}
	// Nor does any stored message hold them (the command, the audit, the
	// reports).
	noSecretStored(t, e, events.StreamCommands, events.StreamAudit, events.StreamReports, events.StreamTelemetry)
}

// TestALogsRequestForAnotherDeploymentIsSaidPlainly: the agent answers
// with an error naming what it does not run.
func TestALogsRequestForAnotherDeploymentIsSaidPlainly(t *testing.T) {
	_, rd := printing(t, []string{"ok"})
	_, err := readLogs(t, rd, func(r *devicelogs.Request) { r.Deployment = "other" })
	var de *devicelogs.DeviceError
	if !errors.As(err, &de) || !strings.Contains(de.Message, "lab/other is not on this device") {
		t.Fatalf("stream ended with %v, want the device saying it does not run lab/other", err)
	}
}

// TestALogsRequestTheDeviceRefusesIsAuditedAsRefusedByTheDevice: a
// request the reader was allowed is audited before the device is asked;
// when the device refuses it (the workload is not its own, it has no such
// service), a second record of the same request says the device refused
// it and why, in the device's words made printable, holding no secret. A
// request the device answers leaves its one record alone.
func TestALogsRequestTheDeviceRefusesIsAuditedAsRefusedByTheDevice(t *testing.T) {
	e, rd := printing(t, []string{"db password " + secretValue, "ok"})
	tests := []struct {
		name   string
		change func(*devicelogs.Request)
		want   []audited
	}{
		{"a Deployment the device does not run", func(r *devicelogs.Request) { r.Deployment = "other" },
			[]audited{{Deployment: "other", Service: "api", Allowed: true},
				{Deployment: "other", Service: "api", RefusedBy: events.RefusedByDevice, Reason: "the device refused it: the Deployment lab/other is not on this device"}}},
		{"a service the Deployment does not have", func(r *devicelogs.Request) { r.Service = "nope" },
			[]audited{{Deployment: "analysis", Service: "nope", Allowed: true},
				{Deployment: "analysis", Service: "nope", RefusedBy: events.RefusedByDevice,
					Reason: `the device refused it: the Deployment lab/analysis has no service or init container "nope" (it has [api])`}}},
		{"a request the device answers", nil, []audited{{Deployment: "analysis", Service: "api", Allowed: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(logsAudit(t, e))
			_, err := readLogs(t, rd, tc.change)
			var de *devicelogs.DeviceError
			if (len(tc.want) > 1) != errors.As(err, &de) {
				t.Fatalf("the read ended with %v", err)
			}
			got := logsAudit(t, e)[before:]
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(audited{}, "Request")); diff != "" {
				t.Fatalf("the request's audit records (-want +got):\n%s", diff)
			}
			for _, a := range got {
				if a.Request != got[0].Request || a.Request == "" {
					t.Errorf("audit records of one request name requests %q and %q", got[0].Request, a.Request)
				}
			}
		})
	}
	noSecretStored(t, e, events.StreamAudit)
}

// audited is what TestALogsRequestTheDeviceRefusesIsAuditedAsRefusedByTheDevice
// compares of a device.logs.requested record.
type audited struct {
	Deployment, Service, Request string
	Allowed                      bool
	RefusedBy, Reason            string
}

// logsAudit is device d1's device.logs.requested records, in order.
func logsAudit(t *testing.T, e *agentEnv) []audited {
	t.Helper()
	subj, err := events.DashboardDeviceSubject("d1")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
	defer cancel()
	var out []audited
	for rec, err := range e.st.Replay(ctx, subj, events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		if rec.Event.Type != events.TypeDeviceLogsRequested {
			continue
		}
		d, err := events.Decode[events.DeviceLogsRequested](rec.Event)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, audited{Deployment: d.Deployment, Service: d.Service, Request: d.Request, Allowed: d.Allowed, RefusedBy: d.RefusedBy, Reason: d.Reason})
	}
	return out
}

// noSecretStored fails when a message of the named streams holds the
// Deployment's secret value or its pull password.
func noSecretStored(t *testing.T, e *agentEnv, names ...string) {
	t.Helper()
	for _, name := range names {
		stream, err := e.st.JetStream().Stream(e.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			m, err := stream.GetMsg(e.ctx, seq)
			if err != nil {
				continue
			}
			if strings.Contains(string(m.Data), secretValue) || strings.Contains(string(m.Data), "pull-pass") {
				t.Fatalf("%s message %d holds a secret: %s", name, seq, m.Data)
			}
		}
	}
}

// BenchmarkLogLinesEndToEnd reads a simulated service's 1,000 lines of
// 100 bytes through its agent and NATS per iteration: lines per second
// from one device end to end (the agent paces at 1 MiB/s).
func BenchmarkLogLinesEndToEnd(b *testing.B) {
	lines := make([]string, 1000)
	for i := range lines {
		lines[i] = fmt.Sprintf("%04d %s", i, strings.Repeat("x", 95))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rt := sim.New(sim.Options{LocalImages: []string{"reg.example/api:v1"}, Behave: func(spec runtime.ContainerSpec) sim.Behaviour {
		bh := sim.DefaultBehaviour(spec)
		bh.Output = lines
		return bh
	}})
	srv, st := natstest.Provisioned(b)
	nc := natstest.Connect(b, srv, nats.CustomInboxPrefix("_INBOX_d1"))
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Options{Device: "d1", Conn: nc, Reconciler: &agent.Reconciler{Runtime: rt, StopTimeout: time.Second},
			HeartbeatInterval: time.Hour})
	}()
	defer func() { cancel(); <-done }()
	raw, _ := json.Marshal(score.Score{Type: "PodmanV0", Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: "reg.example/api:v1"}}}})
	intent, _ := json.Marshal(events.DeviceIntent{Device: "d1", Deployments: []events.IntentEntry{{Namespace: "lab", Name: "analysis",
		UID: "u1", Generation: 1, RevisionID: "r", Score: raw}}})
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		b.Fatal(err)
	}
	rd, err := devicelogs.New(devicelogs.Options{Conn: natstest.Connect(b, srv), Store: st})
	if err != nil {
		b.Fatal(err)
	}
	r := devicelogs.Request{Namespace: "lab", Device: "d1", Deployment: "analysis", Service: "api", Who: devicelogs.Who{User: "bench", Via: events.ViaCLI}}
	allow := devicelogs.AuthorizerFunc(func(context.Context, devicelogs.Request) error { return nil })
	read := func() (int, error) {
		s, err := rd.Open(ctx, r, allow)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		n := 0
		for {
			ls, err := s.Next(ctx)
			n += len(ls)
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			if err != nil {
				return n, err
			}
		}
	}
	// The intent is put until the agent answers with every line: it may
	// subscribe after the first put.
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		_, _ = kv.Put(ctx, "d1", intent)
		n, err := read()
		return err == nil && n == len(lines)
	}); err != nil {
		b.Fatalf("the agent never answered with its %d lines", len(lines))
	}
	b.ResetTimer()
	start := time.Now()
	total := 0
	for b.Loop() {
		n, err := read()
		if err != nil || n != len(lines) {
			b.Fatalf("read %d lines: %v", n, err)
		}
		total += n
	}
	b.ReportMetric(float64(total)/time.Since(start).Seconds(), "lines/s")
}

// TestADiagnosisShowsContainersHostEngineAndPasses: a diagnose request is
// answered with the Deployment's containers and ports, the host's disk and
// memory, the engine, the last passes and reports, and a clock offset.
func TestADiagnosisShowsContainersHostEngineAndPasses(t *testing.T) {
	_, rd := printing(t, []string{"ok"})
	d, err := rd.Diagnose(context.Background(), devicelogs.Request{Namespace: "lab", Device: "d1",
		Who: devicelogs.Who{User: "ada", Via: events.ViaCLI}}, devicelogs.AuthorizerFunc(func(context.Context, devicelogs.Request) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Containers.Workloads) != 1 || len(d.Containers.Workloads[0].Containers) != 1 {
		t.Fatalf("containers %+v, want analysis's api", d.Containers)
	}
	c := d.Containers.Workloads[0].Containers[0]
	if c.Name != "api" || c.State != "running" || c.ImageDigest == "" {
		t.Errorf("container %+v, want api running with its digest", c)
	}
	if d.Engine != "sim" || d.MemTotal == 0 || d.DiskTotal == 0 || d.DiskFree > d.DiskTotal {
		t.Errorf("engine %q, memory %d, disk %d of %d: want them known", d.Engine, d.MemTotal, d.DiskFree, d.DiskTotal)
	}
	if len(d.Passes) == 0 || d.Passes[len(d.Passes)-1].Result != "converged" {
		t.Errorf("passes %+v, want the converged pass last", d.Passes)
	}
	if len(d.Workloads) != 1 || d.Workloads[0].Phase != events.WorkloadConverged {
		t.Errorf("workloads %+v, want analysis converged", d.Workloads)
	}
	if d.ClockOffset > 5*time.Second || d.ClockOffset < -5*time.Second {
		t.Errorf("clock offset %s on one machine", d.ClockOffset)
	}
}

// TestAFollowedQuietServiceStaysOpenAndNewLinesComeAtOnce: while the
// service prints nothing the agent says it is there (the reader does not
// call it gone), and a line printed then arrives within a second.
func TestAFollowedQuietServiceStaysOpenAndNewLinesComeAtOnce(t *testing.T) {
	e, rd := printing(t, []string{"started"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := rd.Open(ctx, devicelogs.Request{Namespace: "lab", Device: "d1", Deployment: "analysis", Service: "api", Follow: true,
		Who: devicelogs.Who{User: "ada", Via: events.ViaCLI}}, devicelogs.AuthorizerFunc(func(context.Context, devicelogs.Request) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	next := func() []string {
		t.Helper()
		ls, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("the follow ended: %v", err)
		}
		var out []string
		for _, l := range ls {
			out = append(out, l.Text)
		}
		return out
	}
	var got []string
	for len(got) == 0 {
		got = next()
	}
	if diff := cmp.Diff([]string{"started"}, got); diff != "" {
		t.Fatalf("first lines (-want +got):\n%s", diff)
	}
	// Quiet: the next chunk is a keep-alive, within the reader's bound.
	if ls := next(); len(ls) != 0 {
		t.Fatalf("got lines %q from a quiet service", ls)
	}
	c := e.containers()["api"]
	if err := e.rt.Print(c.ID, "GET /api 200"); err != nil {
		t.Fatal(err)
	}
	printed := time.Now()
	got = nil
	for len(got) == 0 {
		got = next()
	}
	if took := time.Since(printed); took > 2*time.Second || got[0] != "GET /api 200" {
		t.Fatalf("got %q %s after it was printed", got, took)
	}
}

// TestTheDeviceRefusesStreamsBeyondItsLimitWhateverTheReaders: two reader
// processes (the CLI and the dashboard, each within its own limit of
// devicelogs.DefaultMaxStreamsPerDevice) follow the same device; the
// agent answers agent.MaxLogStreams of them and refuses the others with
// devicelogs.ErrTooManyStreams, saying the limit is the device's; once
// one follow ends another reader gets its slot.
func TestTheDeviceRefusesStreamsBeyondItsLimitWhateverTheReaders(t *testing.T) {
	e, cli := printing(t, []string{"started"})
	dash, err := devicelogs.New(devicelogs.Options{Conn: natstest.Connect(t, e.srv), Store: e.st})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	allow := devicelogs.AuthorizerFunc(func(context.Context, devicelogs.Request) error { return nil })
	follow := func(rd *devicelogs.Reader, via string) (*devicelogs.Stream, error) {
		t.Helper()
		s, err := rd.Open(ctx, devicelogs.Request{Namespace: "lab", Device: "d1", Deployment: "analysis", Service: "api", Follow: true,
			Who: devicelogs.Who{User: "ada", Via: via}}, allow)
		if err != nil {
			t.Fatal(err)
		}
		// The first chunk says whether the device answers it: lines
		// (or a keep-alive), or its refusal.
		if _, err := s.Next(ctx); err != nil {
			s.Close()
			return nil, err
		}
		return s, nil
	}
	var open []*devicelogs.Stream
	defer func() {
		for _, s := range open {
			s.Close()
		}
	}()
	for range agent.MaxLogStreams {
		s, err := follow(cli, events.ViaCLI)
		if err != nil {
			t.Fatalf("a follow within the device's limit: %v", err)
		}
		open = append(open, s)
	}
	for i := range devicelogs.DefaultMaxStreamsPerDevice {
		_, err := follow(dash, events.ViaDashboard)
		if !errors.Is(err, devicelogs.ErrTooManyStreams) || !strings.Contains(err.Error(), fmt.Sprintf("this device already answers %d", agent.MaxLogStreams)) {
			t.Fatalf("follow %d of the second reader ended with %v, want ErrTooManyStreams saying the device's limit", i+1, err)
		}
	}
	// A follow ends: its slot on the device is free (the agent learns it
	// from the logs-stop command).
	if err := open[0].Close(); err != nil {
		t.Fatal(err)
	}
	open = open[1:]
	testenv.EventuallyErr(t, "the second reader follows once a slot is free", time.Minute, func() error {
		s, err := follow(dash, events.ViaDashboard)
		if err == nil {
			open = append(open, s)
		}
		return err
	})
}

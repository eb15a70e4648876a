package agent_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

type agentEnv struct {
	*world
	st   *events.Store
	kv   jetstream.KeyValue
	nc   *nats.Conn
	srv  *natsembed.Server
	stop func()
}

func startAgent(t *testing.T, opts ...func(*agent.Options)) *agentEnv {
	return startAgentOn(t, newWorld(t), opts...)
}

// startAgentOn is startAgent on the simulated device w.
func startAgentOn(t *testing.T, w *world, opts ...func(*agent.Options)) *agentEnv {
	srv, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(w.ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	e := &agentEnv{world: w, st: st, kv: kv, srv: srv}
	e.run(t, opts...)
	return e
}

// restartAgent starts another agent for the device of prev (its engine,
// its server), once prev's was stopped.
func restartAgent(t *testing.T, prev *agentEnv, opts ...func(*agent.Options)) *agentEnv {
	e := &agentEnv{world: prev.world, st: prev.st, kv: prev.kv, srv: prev.srv}
	e.run(t, opts...)
	return e
}

// run starts the agent of e on a new connection and waits for its first
// inventory after the last one stored.
func (e *agentEnv) run(t *testing.T, opts ...func(*agent.Options)) {
	w := e.world
	var after uint64
	if rec, err := e.st.Last(w.ctx, "fleet.report.d1.inventory"); err == nil {
		after = rec.Sequence
	}
	nc := natstest.Connect(t, e.srv, nats.CustomInboxPrefix("_INBOX_d1"))
	e.nc = nc
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	o := agent.Options{Device: "d1", Conn: nc, Reconciler: w.r, AgentVersion: "test",
		Labels: map[string]string{"role": "analyzer"}, HeartbeatInterval: time.Hour}
	for _, f := range opts {
		f(&o)
	}
	go func() { done <- agent.Run(ctx, o) }()
	// The agent subscribes before its first report: once the inventory is
	// there, commands and intent changes reach it.
	if testenv.Poll(context.Background(), 20*time.Second, func() bool {
		rec, err := e.st.Last(w.ctx, "fleet.report.d1.inventory")
		return err == nil && rec.Sequence > after
	}) != nil {
		t.Fatal("the agent never reported its inventory")
	}
	e.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent.Run: %v", err)
		}
	}
	t.Cleanup(func() {
		select {
		case <-ctx.Done():
		default:
			e.stop()
		}
	})
}

func (e *agentEnv) put(entries ...events.IntentEntry) {
	e.t.Helper()
	b, err := json.Marshal(events.DeviceIntent{Device: "d1", Deployments: entries})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.kv.Put(e.ctx, "d1", b); err != nil {
		e.t.Fatal(err)
	}
}

// statuses returns every workload status the device reported.
func (e *agentEnv) statuses() []events.WorkloadStatus {
	e.t.Helper()
	var out []events.WorkloadStatus
	for r, err := range e.st.Replay(e.ctx, "fleet.report.d1.workload", events.FromStart()) {
		if err != nil {
			e.t.Fatal(err)
		}
		ws, err := events.Decode[events.WorkloadStatus](r.Event)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, ws)
	}
	return out
}

func (e *agentEnv) waitStatus(gen int64, phase events.WorkloadPhase) events.WorkloadStatus {
	e.t.Helper()
	var got events.WorkloadStatus
	if testenv.Poll(context.Background(), 20*time.Second, func() bool {
		for _, s := range e.statuses() {
			if s.Generation == gen && s.Phase == phase {
				got = s
				return true
			}
		}
		return false
	}) != nil {
		e.t.Fatalf("no %s report for generation %d; got %+v", phase, gen, e.statuses())
	}
	return got
}

func TestTheAgentConvergesOnItsIntentAndReports(t *testing.T) {
	e := startAgent(t)
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	if c := e.containers()["api"]; c.Labels[agent.LabelGeneration] != "1" {
		t.Errorf("api labels %v", c.Labels)
	}

	t.Run("a new revision on the key is applied and reported", func(t *testing.T) {
		s := baseScore()
		s.Data.Services[1].Image = "reg.example/api:v2"
		e.put(entry(t, 2, s))
		e.waitStatus(2, events.WorkloadConverged)
	})
	t.Run("a failing init container is reported as failed with its error", func(t *testing.T) {
		s := baseScore()
		s.Data.InitContainer.Image = "reg.example/migrate-exit-3:v1"
		e.put(entry(t, 3, s))
		st := e.waitStatus(3, events.WorkloadFailed)
		if !strings.Contains(st.Error, "exited with code 3") {
			t.Errorf("error %q", st.Error)
		}
	})
	t.Run("deleting the key removes the Deployment's containers", func(t *testing.T) {
		if err := e.kv.Delete(e.ctx, "d1"); err != nil {
			t.Fatal(err)
		}
		e.waitStatus(3, events.WorkloadRemoved)
		if n := len(e.containers()); n != 0 {
			t.Errorf("%d containers left", n)
		}
	})
	t.Run("heartbeat and inventory were reported", func(t *testing.T) {
		if _, err := e.st.Last(e.ctx, "fleet.report.d1.heartbeat"); err != nil {
			t.Error(err)
		}
		rec, err := e.st.Last(e.ctx, "fleet.report.d1.inventory")
		if err != nil {
			t.Fatal(err)
		}
		inv, _ := events.Decode[events.DeviceInventory](rec.Event)
		if inv.Labels["role"] != "analyzer" || inv.AgentVersion != "test" || inv.Arch == "" {
			t.Errorf("inventory %+v", inv)
		}
	})
	t.Run("no report carries a secret value", func(t *testing.T) {
		for _, filter := range []string{"fleet.report.d1.workload", "fleet.report.d1.heartbeat", "fleet.report.d1.inventory"} {
			for r, err := range e.st.Replay(e.ctx, filter, events.FromStart()) {
				if err != nil {
					t.Fatal(err)
				}
				if b, _ := r.Event.Marshal(); strings.Contains(string(b), secretValue) {
					t.Errorf("%s carries the secret", r.Subject)
				}
			}
		}
	})
}

func TestAgentCommands(t *testing.T) {
	e := startAgent(t)
	// A command is appended to FLEET_COMMANDS (the audit trail); the agent
	// answers with a device.command.result report naming the command's id.
	ask := func(command string) events.CommandResult {
		t.Helper()
		ev, err := events.New(events.Keys{Device: "d1"}, events.AgentCommand{Command: command, RequestedBy: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.Append(e.ctx, ev); err != nil {
			t.Fatal(err)
		}
		var res events.CommandResult
		if testenv.Poll(context.Background(), 20*time.Second, func() bool {
			for r, err := range e.st.Replay(e.ctx, "fleet.report.d1.command", events.FromStart()) {
				if err != nil {
					t.Fatal(err)
				}
				if got, err := events.Decode[events.CommandResult](r.Event); err == nil && got.CommandID == ev.ID.String() {
					res = got
					return true
				}
			}
			return false
		}) != nil {
			t.Fatalf("no result for %s", command)
		}
		return res
	}
	if res := ask(agent.CommandReconcileNow); !res.OK {
		t.Errorf("reconcile-now: %+v", res)
	}
	if res := ask(agent.CommandReportInventory); !res.OK {
		t.Errorf("report-inventory: %+v", res)
	}
	if res := ask("format-disk"); res.OK || !strings.Contains(res.Error, `unknown command "format-disk"`) {
		t.Errorf("unknown command: %+v", res)
	}
}

func TestReportsMadeWhileDisconnectedAreSentOnReconnect(t *testing.T) {
	w := newWorld(t)
	store := t.TempDir()
	srv := natstest.StartWith(t, natsembed.Options{StoreDir: store, Sync: natsembed.FastSync})
	u, _ := url.Parse(srv.ClientURL())
	port, _ := strconv.Atoi(u.Port())
	admin := natstest.Connect(t, srv, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	st, err := events.NewStore(admin, events.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Provision(w.ctx, st.JetStream(), events.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	// Keep every heartbeat, on disk across the server's restart, so the
	// test can count those made offline: FLEET_LIVENESS itself keeps only
	// the last one, in memory (ADR 0024). The agent is what is tested.
	if err := st.JetStream().DeleteStream(w.ctx, events.StreamLiveness); err != nil {
		t.Fatal(err)
	}
	if _, err := st.JetStream().CreateStream(w.ctx, jetstream.StreamConfig{Name: events.StreamLiveness,
		Subjects: []string{"fleet.report.*.heartbeat"}, Storage: jetstream.FileStorage, MaxMsgsPerSubject: 100_000, AllowDirect: true, NoAck: true}); err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, srv, nats.CustomInboxPrefix("_INBOX_d1"), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	ctx, cancel := context.WithCancel(w.ctx)
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(ctx, agent.Options{Device: "d1", Conn: nc, Reconciler: w.r, HeartbeatInterval: 25 * time.Millisecond})
	}()
	defer func() { cancel(); <-done }()
	poll := func(what string, cond func() bool) {
		t.Helper()
		testenv.Eventually(t, what, 20*time.Second, cond)
	}
	poll("the first heartbeat", func() bool { _, err := st.Last(w.ctx, "fleet.report.d1.heartbeat"); return err == nil })

	srv.Shutdown()
	poll("the agent to notice", func() bool { return !nc.IsConnected() })
	down := time.Now()
	// Let many heartbeats fall due while the server is away.
	poll("heartbeats to fall due", func() bool { return time.Since(down) > 500*time.Millisecond })
	restart := time.Now() // every heartbeat made before this was made offline
	natstest.StartWith(t, natsembed.Options{StoreDir: store, Port: port, Sync: natsembed.FastSync})
	poll("the agent to reconnect", nc.IsConnected)
	back := time.Now()
	poll("the admin to reconnect", admin.IsConnected)
	made := func(from, to time.Time) int {
		n := 0
		for r, err := range st.Replay(w.ctx, "fleet.report.d1.heartbeat", events.FromStart()) {
			if err != nil {
				return -1
			}
			if r.Event.Time.After(from) && r.Event.Time.Before(to) {
				n++
			}
		}
		return n
	}
	poll("a heartbeat made offline to arrive", func() bool { return made(down, back) >= 1 })
	// About 20 fell due while the server was down; coalescing keeps the
	// last. (Between the restart and the test seeing the reconnect, on a
	// loaded machine, more may be made and sent live: not counted.)
	if n := made(down, restart); n > 1 {
		t.Errorf("%d heartbeats made while the server was down were stored, want them coalesced into 1", n)
	}
}

func TestAnUnavailableEngineIsRetriedNotReportedAsAFailure(t *testing.T) {
	e := startAgent(t)
	e.rt.SetUnavailable(true)
	e.put(entry(t, 1, baseScore()))
	st := e.waitStatus(1, events.WorkloadPending)
	if !strings.Contains(st.Error, "container engine unavailable") {
		t.Errorf("pending report error %q does not say the engine is unavailable", st.Error)
	}
	// The engine comes back: the agent retries on its own, with no new
	// intent, and converges.
	e.rt.SetUnavailable(false)
	e.waitStatus(1, events.WorkloadConverged)
	for _, s := range e.statuses() {
		if s.Phase == events.WorkloadFailed {
			t.Errorf("a failure was reported while the engine was unavailable: %+v", s)
		}
	}
}

// TestANotificationIsOnlyAHintTheStoredIntentIsWhatRuns: whatever arrives
// on the device's notification subject only makes the agent read its key;
// a notified value the store does not hold (here a forged one the stream
// refused, so that only core subscribers see it) is never applied, and
// neither is garbage. The next real change is applied as usual.
func TestANotificationIsOnlyAHintTheStoredIntentIsWhatRuns(t *testing.T) {
	e := startAgent(t)
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)

	forgedScore := baseScore()
	forgedScore.Data.Services[0].Image = "reg.example/evil:v1"
	forged, err := json.Marshal(events.DeviceIntent{Device: "d1", Deployments: []events.IntentEntry{entry(t, 99, forgedScore)}})
	if err != nil {
		t.Fatal(err)
	}
	// Forged notifications on the agent's subscription. Only a value that
	// names this device, with the stream's headers naming this device's key
	// and a sequence, is run as it is (the bucket republishes exactly that
	// once stored; the device account lets no device publish or answer
	// there: authcallout's injection suite). Everything else is only a hint:
	// it triggers a direct get, and the stored value is what runs. The
	// forged value comes last, so that it is the one pending when the agent
	// reads (an agent that applied notified values would run it).
	kvD1, kvD2 := "$KV."+events.BucketIntent+".d1", "$KV."+events.BucketIntent+".d2"
	for _, f := range []struct {
		data         []byte
		subject, seq string // the stream headers (none when empty)
	}{
		{[]byte("not json"), kvD1, "999"},
		{[]byte(`{"device":"d2","deployments":[]}`), kvD2, "999"},
		{forged, kvD2, "999"}, // another key's answer
		{forged, kvD1, ""},    // no sequence: not stored
		{forged, "", ""},      // a bare publish
	} {
		m := nats.NewMsg("fleet.notify.intent.d1")
		m.Data = f.data
		if f.subject != "" {
			m.Header.Set("Nats-Subject", f.subject)
		}
		if f.seq != "" {
			m.Header.Set("Nats-Sequence", f.seq)
		}
		if err := e.nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	s := baseScore()
	s.Data.Services[1].Image = "reg.example/api:v2"
	e.put(entry(t, 2, s))
	e.waitStatus(2, events.WorkloadConverged)
	for _, st := range e.statuses() {
		if st.Generation == 99 {
			t.Errorf("the agent reported the forged notification's generation: %+v", st)
		}
	}
	for name, c := range e.containers() {
		if strings.Contains(c.Image, "evil") {
			t.Errorf("container %s runs %s from a forged notification", name, c.Image)
		}
	}
	if v, err := e.kv.Get(e.ctx, "d1"); err != nil || strings.Contains(string(v.Value()), "evil") {
		t.Fatalf("the stored intent: %v; the forged notification must not have been stored", err)
	}
}

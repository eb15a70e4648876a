package agent_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// countingRuntime counts List calls: every pass lists the engine, so the
// count says that passes ran without looking at their reports.
type countingRuntime struct {
	runtime.Runtime
	lists atomic.Int64
}

func (c *countingRuntime) List(ctx context.Context) ([]runtime.Container, error) {
	c.lists.Add(1)
	return c.Runtime.List(ctx)
}

// waitPasses waits until the engine was listed n more times than now
// (several passes ran).
func (c *countingRuntime) waitPasses(t *testing.T, n int64) {
	t.Helper()
	from := c.lists.Load()
	testenv.Eventually(t, "passes to run", 20*time.Second, func() bool { return c.lists.Load() >= from+n })
}

// rotatable is a secret source whose values a test changes (a rotation at
// the source); reads counts the reads.
type rotatable struct {
	mu    sync.Mutex
	v     map[string]string
	reads int
}

func (r *rotatable) Resolve(_ context.Context, path, key string) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reads++
	v, ok := r.v[path+"#"+key]
	if !ok {
		return "", errors.New("no such secret")
	}
	return v, nil
}

func (r *rotatable) set(ref, v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.v[ref] = v
}

// command appends an agent command and waits for its result.
func (e *agentEnv) command(command string) events.CommandResult {
	e.t.Helper()
	ev, err := events.New(events.Keys{Device: "d1"}, events.AgentCommand{Command: command, RequestedBy: "test"})
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.st.Append(e.ctx, ev); err != nil {
		e.t.Fatal(err)
	}
	var res events.CommandResult
	testenv.Eventually(e.t, "the result of "+command, 20*time.Second, func() bool {
		for r, err := range e.st.Replay(e.ctx, "fleet.report.d1.command", events.FromStart()) {
			if err != nil {
				return false
			}
			if got, err := events.Decode[events.CommandResult](r.Event); err == nil && got.CommandID == ev.ID.String() {
				res = got
				return true
			}
		}
		return false
	})
	return res
}

// count is the number of reports on subject.
func (e *agentEnv) count(subject string) int {
	e.t.Helper()
	n := 0
	for _, err := range e.st.Replay(e.ctx, subject, events.FromStart()) {
		if err != nil {
			e.t.Fatal(err)
		}
		n++
	}
	return n
}

// TestAPassNeverBlocksTheAgent: while a pass waits on an init container
// that never ends, heartbeats and commands keep flowing, and a newer intent
// cancels the waiting pass and is applied; the cancelled revision is never
// reported as converged or failed.
func TestAPassNeverBlocksTheAgent(t *testing.T) {
	e := startAgent(t, func(o *agent.Options) { o.HeartbeatInterval = 20 * time.Millisecond })
	e.rt.AddImage("reg.example/hangs:v1")
	hung := baseScore()
	hung.Data.InitContainer.Image = "reg.example/hangs:v1" // runs until stopped
	e.put(entry(t, 1, hung))
	e.waitStatus(1, events.WorkloadApplying)
	testenv.Eventually(t, "the init container to run", 20*time.Second, func() bool {
		return e.containers()["migrate"].State == runtime.StateRunning
	})

	// Heartbeats are telemetry: the stream keeps the last few per device;
	// their sequence says how many were made.
	beat := func() uint64 {
		r, err := e.st.Last(e.ctx, "fleet.report.d1.heartbeat")
		if err != nil {
			return 0
		}
		return r.Sequence
	}
	beats := beat()
	testenv.Eventually(t, "heartbeats while the pass waits", 20*time.Second, func() bool { return beat() >= beats+3 })
	if res := e.command(agent.CommandReportInventory); !res.OK {
		t.Errorf("report-inventory while a pass waits: %+v", res)
	}
	if res := e.command(agent.CommandReconcileNow); !res.OK {
		t.Errorf("reconcile-now while a pass waits: %+v", res)
	}
	if e.containers()["migrate"].State != runtime.StateRunning {
		t.Fatal("the init container stopped before the newer intent came")
	}

	e.put(entry(t, 2, baseScore()))
	e.waitStatus(2, events.WorkloadConverged)
	for _, s := range e.statuses() {
		if s.Generation == 1 && s.Phase != events.WorkloadApplying {
			t.Errorf("the cancelled revision was reported %s: %+v", s.Phase, s)
		}
	}
	for name, c := range e.containers() {
		if c.Image == "reg.example/hangs:v1" {
			t.Errorf("container %s of the cancelled revision is left (%s)", name, c.State)
		}
	}
}

// TestAResyncThatChangesNothingReportsNothing: once a revision converged,
// passes that find nothing to do append no workload report (no Applying,
// no Converged again), and neither does a reconnect's re-report go back
// through Applying.
func TestAResyncThatChangesNothingReportsNothing(t *testing.T) {
	var crt *countingRuntime
	e := startAgent(t, func(o *agent.Options) {
		crt = &countingRuntime{Runtime: o.Reconciler.Runtime}
		o.Reconciler.Runtime = crt
		o.ResyncInterval = 10 * time.Millisecond
	})
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	crt.waitPasses(t, 1) // the pass that converged has ended
	before := e.count("fleet.report.d1.workload")
	crt.waitPasses(t, 20)
	if after := e.count("fleet.report.d1.workload"); after != before {
		t.Errorf("%d workload reports after passes that changed nothing, want none: %+v", after-before, e.statuses()[before:])
	}

	t.Run("a pass that finds a service down and repairs it reports nothing new either", func(t *testing.T) {
		if err := e.rt.Remove(e.ctx, e.containers()["worker"].ID, true); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "the worker to be recreated", 20*time.Second, func() bool {
			return e.containers()["worker"].State == runtime.StateRunning
		})
		crt.waitPasses(t, 4)
		if after := e.count("fleet.report.d1.workload"); after != before {
			t.Errorf("%d workload reports, want none: the revision stayed converged", after-before)
		}
	})
}

// TestTheAgentDoesNotWatchTheSecretSource: a rotated secret value reaches
// a running revision neither by resync nor by any pass that repairs it; it
// is read on reconcile-now, and with a new revision.
func TestTheAgentDoesNotWatchTheSecretSource(t *testing.T) {
	src := &rotatable{v: map[string]string{"lab/db#password": secretValue}}
	var crt *countingRuntime
	e := startAgent(t, func(o *agent.Options) {
		crt = &countingRuntime{Runtime: o.Reconciler.Runtime}
		o.Reconciler.Runtime = crt
		o.Reconciler.Secrets = src
		o.ResyncInterval = 10 * time.Millisecond
	})
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	first := e.containers()["api"]

	src.set("lab/db#password", "rotated-1")
	crt.waitPasses(t, 20)
	if got := e.containers()["api"]; got.ID != first.ID || got.Labels[agent.LabelRevision] != first.Labels[agent.LabelRevision] {
		t.Fatalf("a resync replaced api after a rotation at the source (revision %s → %s)", first.Labels[agent.LabelRevision], got.Labels[agent.LabelRevision])
	}

	t.Run("reconcile-now reads the source again", func(t *testing.T) {
		if res := e.command(agent.CommandReconcileNow); !res.OK {
			t.Fatalf("reconcile-now: %+v", res)
		}
		testenv.Eventually(t, "api to be replaced with the rotated value", 20*time.Second, func() bool {
			c := e.containers()["api"]
			return c.ID != first.ID && c.State == runtime.StateRunning
		})
	})
	t.Run("a new revision reads the source again", func(t *testing.T) {
		now := e.containers()["api"]
		src.set("lab/db#password", "rotated-2")
		crt.waitPasses(t, 10)
		if got := e.containers()["api"]; got.ID != now.ID {
			t.Fatal("a resync replaced api after the second rotation")
		}
		e.put(entry(t, 2, baseScore()))
		e.waitStatus(2, events.WorkloadConverged)
		// Generation 2 has generation 1's score: its resolved revision (the
		// hash of the score with its secret values) differs from the
		// running one only if the rotated value was read.
		if got := e.containers()["api"]; got.Labels[agent.LabelRevision] == now.Labels[agent.LabelRevision] {
			t.Error("the new revision ran with the value pinned for the previous one")
		}
	})
}

// TestAReportIsEchoedUnchangedAndStoredOnce: reports are never
// acknowledged, so one lost while a cluster's reports stream elects a new
// leader (no reconnect) would never be sent again; the agent publishes
// each workload report again, byte for byte, every RereportInterval within
// EchoWindow. The stream stores an echo only when the original was lost
// (same Nats-Msg-Id within its duplicate window): history does not grow.
func TestAReportIsEchoedUnchangedAndStoredOnce(t *testing.T) {
	e := startAgent(t, func(o *agent.Options) { o.RereportInterval = 50 * time.Millisecond; o.EchoWindow = time.Minute })
	sub, err := e.nc.SubscribeSync("fleet.report.d1.workload")
	if err != nil {
		t.Fatal(err)
	}
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	stored := e.count("fleet.report.d1.workload")
	var converged *nats.Msg
	seen := 0
	testenv.Eventually(t, "the converged report echoed three times", 30*time.Second, func() bool {
		m, err := sub.NextMsg(time.Second)
		if err != nil {
			return false
		}
		ev, err := events.DecodeStored(m.Subject, m.Data)
		if err != nil {
			t.Fatalf("an echo does not decode: %v", err)
		}
		if ws, err := events.Decode[events.WorkloadStatus](ev); err != nil || ws.Phase != events.WorkloadConverged {
			return false
		}
		if converged == nil {
			converged = m
			return false
		}
		if string(m.Data) != string(converged.Data) || m.Header.Get(nats.MsgIdHdr) != converged.Header.Get(nats.MsgIdHdr) {
			t.Fatalf("an echo differs from the report: %s (id %s) after %s (id %s)", m.Data, m.Header.Get(nats.MsgIdHdr), converged.Data, converged.Header.Get(nats.MsgIdHdr))
		}
		seen++
		return seen >= 3
	})
	if got := e.count("fleet.report.d1.workload"); got != stored {
		t.Errorf("the stream holds %d workload reports after the echoes, %d before: an echo of a stored report must not be stored", got, stored)
	}
}

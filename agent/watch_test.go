package agent_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// The monitor through the daemon (ADR 0019), on the simulated engine and
// a fake clock: the test moves the clock and waits for the monitor to
// decide at the new time (a step hook), never for real time to pass.

type watchEnv struct {
	*agentEnv
	clk     *fakeClock
	reg     *prometheus.Registry
	dir     string
	stepped atomic.Int64
}

// startWatched starts an agent on a simulated device, both on a fake
// clock, with a state directory (dir, when not "") and metrics.
func startWatched(t *testing.T, clk *fakeClock, dir string, opts ...func(*agent.Options)) *watchEnv {
	if clk == nil {
		clk = newFakeClock()
	}
	w := newWorld(t, func(o *sim.Options) { o.Now = clk.Now })
	m := agent.NewMetrics(nil)
	e := &watchEnv{clk: clk, dir: dir, reg: registry(t, m)}
	all := append([]func(*agent.Options){func(o *agent.Options) {
		o.Now, o.HealthTick, o.StateDir, o.Metrics = clk.Now, 5*time.Millisecond, dir, m
		agent.SetStepHook(o, func(now time.Time) { e.stepped.Store(now.UnixNano()) })
	}}, opts...)
	e.agentEnv = startAgentOn(t, w, all...)
	return e
}

// advance moves the clock by d and waits until the monitor decided at the
// new time.
func (e *watchEnv) advance(d time.Duration) {
	e.t.Helper()
	e.clk.Add(d)
	now := e.clk.Now()
	testenv.Eventually(e.t, "a monitor step at "+now.Format(time.TimeOnly), 20*time.Second, func() bool {
		return e.stepped.Load() >= now.UnixNano()
	})
}

// deathsSeen is the number of deaths the monitor counted.
func (e *watchEnv) deathsSeen() int {
	s := series(e.t, e.reg)
	n := 0
	for _, r := range []string{"exit", "signal", "oom"} {
		n += int(s[`fleet_agent_container_deaths_total{reason="`+r+`"}`])
	}
	return n
}

// crash crashes service (its restart policy restarts it at once) and
// waits until the monitor counted the death.
func (e *watchEnv) crash(service string, code int, oom bool) {
	e.t.Helper()
	before := e.deathsSeen()
	if err := e.rt.Crash(service, code, oom); err != nil {
		e.t.Fatal(err)
	}
	testenv.Eventually(e.t, "the monitor counts the death of "+service, 20*time.Second, func() bool { return e.deathsSeen() > before })
}

// healthReport is one report on the device's health subject.
type healthReport struct {
	typ events.Type
	events.WorkloadHealth
	raw []byte
}

func (r healthReport) String() string {
	return fmt.Sprintf("%s gen %d %s", strings.TrimPrefix(string(r.typ), "device.workload."), r.Generation, r.Reason)
}

// health returns every health report the device sent.
func (e *watchEnv) health() []healthReport {
	e.t.Helper()
	var out []healthReport
	for r, err := range e.st.Replay(e.ctx, "fleet.report.d1.health", events.FromStart()) {
		if err != nil {
			e.t.Fatal(err)
		}
		wh, err := events.Decode[events.WorkloadHealth](r.Event)
		if err != nil {
			e.t.Fatal(err)
		}
		raw, _ := r.Event.Marshal()
		out = append(out, healthReport{typ: r.Event.Type, WorkloadHealth: wh, raw: raw})
	}
	return out
}

func (e *watchEnv) healthText() string {
	var s []string
	for _, r := range e.health() {
		s = append(s, r.String())
	}
	return strings.Join(s, ", ")
}

// waitHealth waits until the health reports read want.
func (e *watchEnv) waitHealth(want string) []healthReport {
	e.t.Helper()
	if testenv.Poll(e.ctx, 20*time.Second, func() bool { return e.healthText() == want }) != nil {
		dc, _ := e.snapshot()
		e.t.Fatalf("health reports %q, want %q (deaths %v, containers %+v)", e.healthText(), want, e.deathsSeen(), dc)
	}
	return e.health()
}

// crashLoopScore is the base score whose api prints a secret and an
// error, then exits with code 2.
func (e *watchEnv) printCrashOutput() {
	e.t.Helper()
	if err := e.rt.Print("api", "connecting as admin with "+secretValue, "\x1b[31mfatal: DB_HOST is not set\x1b[0m"); err != nil {
		e.t.Fatal(err)
	}
}

func TestACrashLoopIsDegradedAfterTheThirdDeath(t *testing.T) {
	e := startWatched(t, nil, t.TempDir())
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	e.printCrashOutput()

	e.crash("api", 2, false)
	e.advance(10 * time.Second)
	e.crash("api", 2, false)
	e.advance(10 * time.Second)
	if got := e.healthText(); got != "" {
		t.Fatalf("after two deaths: %s", got)
	}
	e.crash("api", 2, false)
	reps := e.waitHealth("degraded gen 1 CrashLoop")

	rep := reps[0]
	if rep.Namespace != "lab" || rep.Deployment != "analysis" || rep.UID != "u1" || rep.Window != 300 || len(rep.Services) != 1 {
		t.Fatalf("report %+v", rep.WorkloadHealth)
	}
	s := rep.Services[0]
	if s.Name != "api" || s.ExitCode != 2 || s.Restarts != 3 || s.RestartsTotal != 3 || s.State != "running" || s.ExitedAt == nil {
		t.Errorf("service %+v", s)
	}
	if !slices.Equal(s.Logs, []string{"connecting as admin with ***", "fatal: DB_HOST is not set"}) {
		t.Errorf("logs %q, want the last lines, redacted and without colour codes", s.Logs)
	}
	if strings.Contains(string(rep.raw), secretValue) {
		t.Error("the report carries the secret value")
	}

	t.Run("a fixed revision converges and nothing more is said of the old one", func(t *testing.T) {
		s := baseScore()
		s.Data.Services[0].Image = "reg.example/api:v2"
		e.put(entry(t, 2, s))
		e.waitStatus(2, events.WorkloadConverged)
		for range 12 {
			e.advance(10 * time.Minute)
		}
		if got := e.healthText(); got != "degraded gen 1 CrashLoop" {
			t.Errorf("health reports %s, want the one Degraded only", got)
		}
	})
}

func TestACrashThenStableIsNotDegraded(t *testing.T) {
	e := startWatched(t, nil, t.TempDir())
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	e.crash("api", 2, false)
	for range 20 {
		e.advance(time.Minute)
	}
	if got := e.healthText(); got != "" {
		t.Errorf("health reports %s, want none", got)
	}
	if last := e.statuses()[len(e.statuses())-1]; last.Phase != events.WorkloadConverged {
		t.Errorf("last status %s", last.Phase)
	}
}

func TestAnOOMKillIsDegraded(t *testing.T) {
	e := startWatched(t, nil, t.TempDir())
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	e.crash("worker", 137, true)
	reps := e.waitHealth("degraded gen 1 OOMKilled")
	if s := reps[0].Services[0]; s.Name != "worker" || !s.OOMKilled || s.Signal != "SIGKILL" {
		t.Errorf("service %+v", s)
	}
	if n := series(t, e.reg)[`fleet_agent_container_deaths_total{reason="oom"}`]; n != 1 {
		t.Errorf("%v OOM deaths counted", n)
	}
}

func TestAServiceThatStaysDownIsDegradedAfter30s(t *testing.T) {
	e := startWatched(t, nil, t.TempDir())
	s := baseScore()
	s.Data.Services[1].RestartPolicy = "no"
	e.put(entry(t, 1, s))
	e.waitStatus(1, events.WorkloadConverged)
	e.crash("worker", 1, false)
	// The pass the monitor pokes reports it Failed at once, as today.
	e.waitStatus(1, events.WorkloadFailed)
	e.advance(29 * time.Second)
	if got := e.healthText(); got != "" {
		t.Fatalf("after 29 s: %s", got)
	}
	e.advance(time.Second)
	e.waitHealth("degraded gen 1 Down")
}

func TestRecoveredAfterTheWindowWithBackoff(t *testing.T) {
	e := startWatched(t, nil, t.TempDir())
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	burst := func() {
		for range 3 {
			e.crash("api", 2, false)
			e.advance(time.Second)
		}
	}
	burst()
	e.waitHealth("degraded gen 1 CrashLoop")
	e.advance(4 * time.Minute)
	if got := e.healthText(); got != "degraded gen 1 CrashLoop" {
		t.Fatalf("4 minutes later: %s", got)
	}
	e.advance(time.Minute)
	reps := e.waitHealth("degraded gen 1 CrashLoop, recovered gen 1 Stable")
	if r := reps[1]; r.Window < 300 || len(r.Services) != 1 || r.Services[0].Name != "api" || len(r.Services[0].Logs) != 0 {
		t.Errorf("recovered %+v", r.WorkloadHealth)
	}

	// The second time in the hour it takes twice as long.
	burst()
	e.waitHealth("degraded gen 1 CrashLoop, recovered gen 1 Stable, degraded gen 1 CrashLoop")
	e.advance(9 * time.Minute)
	if got := len(e.health()); got != 3 {
		t.Fatalf("9 minutes later %d reports: %s", got, e.healthText())
	}
	e.advance(time.Minute)
	e.waitHealth("degraded gen 1 CrashLoop, recovered gen 1 Stable, degraded gen 1 CrashLoop, recovered gen 1 Stable")
}

func TestAnAgentRestartKeepsDegradedWithoutNewReports(t *testing.T) {
	run := func(t *testing.T, keepFile bool) (*watchEnv, *watchEnv) {
		dir := t.TempDir()
		first := startWatched(t, nil, dir)
		first.put(entry(t, 1, baseScore()))
		first.waitStatus(1, events.WorkloadConverged)
		for range 3 {
			first.crash("api", 2, false)
		}
		first.waitHealth("degraded gen 1 CrashLoop")
		first.stop()
		if !keepFile {
			dir = ""
		}
		// The same device (engine, stream) with a new agent.
		second := &watchEnv{clk: first.clk, dir: dir}
		m := agent.NewMetrics(nil)
		second.reg = registry(t, m)
		second.agentEnv = restartAgent(t, first.agentEnv, func(o *agent.Options) {
			o.Now, o.HealthTick, o.StateDir, o.Metrics = first.clk.Now, 5*time.Millisecond, dir, m
			agent.SetStepHook(o, func(now time.Time) { second.stepped.Store(now.UnixNano()) })
		})
		return first, second
	}
	t.Run("with the state file it stays Degraded and says nothing new", func(t *testing.T) {
		_, e := run(t, true)
		e.waitStatus(1, events.WorkloadConverged)
		e.crash("api", 2, false)
		e.advance(time.Minute)
		e.crash("api", 2, false)
		// Past the window an agent without the file decides in (5 m), short
		// of the recovery (5 m after the last death).
		for range 9 {
			e.advance(30 * time.Second)
		}
		if got := e.healthText(); got != "degraded gen 1 CrashLoop" {
			t.Errorf("health reports %s, want the first Degraded only", got)
		}
		e.advance(time.Minute)
		e.waitHealth("degraded gen 1 CrashLoop, recovered gen 1 Stable")
	})
	t.Run("without the state file at most one report", func(t *testing.T) {
		_, e := run(t, false)
		e.waitStatus(1, events.WorkloadConverged)
		e.crash("api", 2, false)
		for range 8 {
			e.advance(time.Minute)
		}
		if got := len(e.health()); got > 2 {
			t.Errorf("health reports %s, want at most one more", e.healthText())
		}
	})
}

// noEvents is an engine whose events cannot be watched.
type noEvents struct{ *sim.Runtime }

func (noEvents) Watch(context.Context, map[string]string) (<-chan runtime.ContainerEvent, error) {
	return nil, errors.New("no events here")
}

func TestDeathsAreFoundByPollingWithoutEvents(t *testing.T) {
	clk := newFakeClock()
	w := newWorld(t, func(o *sim.Options) { o.Now = clk.Now })
	w.r.Runtime = noEvents{w.rt}
	m := agent.NewMetrics(nil)
	e := &watchEnv{clk: clk, reg: registry(t, m)}
	e.agentEnv = startAgentOn(t, w, func(o *agent.Options) {
		o.Now, o.HealthTick, o.StateDir, o.Metrics = clk.Now, 5*time.Millisecond, t.TempDir(), m
		agent.SetStepHook(o, func(now time.Time) { e.stepped.Store(now.UnixNano()) })
	})
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	e.advance(10 * time.Second) // a poll sees the containers
	for range 3 {
		if err := e.rt.Crash("api", 2, false); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.healthText(); got != "" {
		t.Fatalf("reports before a poll: %s", got)
	}
	e.advance(10 * time.Second)
	reps := e.waitHealth("degraded gen 1 CrashLoop")
	// A death found by a poll is timed at the poll, with the exit code
	// the engine shows then (the simulated engine clears it on a start).
	if s := reps[0].Services[0]; s.Name != "api" || s.Restarts != 3 || s.RestartsTotal != 3 || s.ExitedAt == nil ||
		!s.ExitedAt.Equal(e.clk.Now()) {
		t.Errorf("service %+v", s)
	}
	if v := series(t, e.reg)[`fleet_agent_watch_mode{mode="poll"}`]; v != 1 {
		t.Errorf("watch mode poll = %v, want 1", v)
	}
}

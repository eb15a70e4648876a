package sim_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// watched is a runtime with one running container "api" (labelled
// app=api, with policy) and a watch on app=api opened before it was
// created.
func watched(t *testing.T, policy string, opts sim.Options) (*sim.Runtime, <-chan runtime.ContainerEvent, string) {
	t.Helper()
	opts.LocalImages = append(opts.LocalImages, imgRunning)
	rt := sim.New(opts)
	events, err := rt.Watch(t.Context(), map[string]string{"app": "api"})
	if err != nil {
		t.Fatal(err)
	}
	id, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: "api", Image: imgRunning, RestartPolicy: policy,
		Labels: map[string]string{"app": "api", "fleet": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	return rt, events, id
}

// pending reads what is waiting on events without blocking, as
// "kind[:code|:health]" strings; "closed" when the channel is closed.
func pending(events <-chan runtime.ContainerEvent) []string {
	var out []string
	for {
		select {
		case e, ok := <-events:
			if !ok {
				return append(out, "closed")
			}
			out = append(out, describe(e))
		default:
			return out
		}
	}
}

func describe(e runtime.ContainerEvent) string {
	switch e.Kind {
	case runtime.EventDied:
		return fmt.Sprintf("died:%d", e.ExitCode)
	case runtime.EventHealth:
		return "health:" + e.Health
	default:
		return string(e.Kind)
	}
}

func TestACrashIsActedOnPerTheRestartPolicy(t *testing.T) {
	tests := []struct {
		name      string
		policy    string
		code      int
		oom       bool
		restarted bool
	}{
		{"always restarts after exit code 0", runtime.RestartAlways, 0, false, true},
		{"unless-stopped restarts after a crash", runtime.RestartUnlessStopped, 2, false, true},
		{"on-failure restarts after a non-zero code", runtime.RestartOnFailure, 2, false, true},
		{"on-failure leaves exit code 0 down", runtime.RestartOnFailure, 0, false, false},
		{"no leaves a crash down", runtime.RestartNo, 2, false, false},
		{"an OOM kill under unless-stopped restarts and is flagged", runtime.RestartUnlessStopped, sim.ExitCodeSIGKILL, true, true},
		{"an OOM kill under no stays down and is flagged", runtime.RestartNo, sim.ExitCodeSIGKILL, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, events, id := watched(t, tt.policy, sim.Options{})
			if got := pending(events); !slices.Equal(got, []string{"start"}) {
				t.Fatalf("after the start the watch delivered %v, want [start]", got)
			}
			if err := rt.Crash("api", tt.code, tt.oom); err != nil {
				t.Fatal(err)
			}
			c, err := rt.Inspect(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{fmt.Sprintf("died:%d", tt.code)}
			wantState, wantRestarts := runtime.StateExited, 0
			if tt.restarted {
				want = append(want, "start")
				wantState, wantRestarts = runtime.StateRunning, 1
			}
			if got := pending(events); !slices.Equal(got, want) {
				t.Errorf("the watch delivered %v, want %v", got, want)
			}
			if c.State != wantState || c.RestartCount != wantRestarts || c.OOMKilled != tt.oom {
				t.Errorf("after the crash: state %s, %d restarts, OOM %v; want %s, %d, %v",
					c.State, c.RestartCount, c.OOMKilled, wantState, wantRestarts, tt.oom)
			}
			if !tt.restarted && c.ExitCode != tt.code {
				t.Errorf("exit code %d, want %d", c.ExitCode, tt.code)
			}
		})
	}
}

func TestRestartsCountUpUntilAStartAndAnOOMKillStaysFlagged(t *testing.T) {
	rt, _, id := watched(t, runtime.RestartAlways, sim.Options{})
	for _, oom := range []bool{true, false, false} {
		if err := rt.Crash(id, 1, oom); err != nil {
			t.Fatal(err)
		}
	}
	c, err := rt.Inspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if c.RestartCount != 3 || !c.OOMKilled {
		t.Errorf("after three crashes, the first an OOM kill: %d restarts, OOM %v; want 3, true (Podman never clears it)", c.RestartCount, c.OOMKilled)
	}
	list, err := rt.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].RestartCount != 0 || list[0].OOMKilled || list[0].ImageDigest != "" {
		t.Errorf("List reports %+v, want no restart count, OOM flag or digest (Inspect only, as on Podman 4.3)", list)
	}
	if err := rt.Stop(t.Context(), id, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if c, _ := rt.Inspect(t.Context(), id); c.RestartCount != 0 {
		t.Errorf("after a Start the restart count is %d, want 0 as Podman resets it", c.RestartCount)
	}
}

func TestStopAndRemoveAreWatchedAndRestartNothing(t *testing.T) {
	rt, events, id := watched(t, runtime.RestartAlways, sim.Options{})
	if err := rt.Stop(t.Context(), id, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if err := rt.Remove(t.Context(), id, true); err != nil {
		t.Fatal(err)
	}
	want := []string{"start", "died:143", "start", "died:137", "removed"}
	if got := pending(events); !slices.Equal(got, want) {
		t.Errorf("the watch delivered %v, want %v", got, want)
	}
}

func TestAWatchSeesOnlyTheContainersCarryingItsLabels(t *testing.T) {
	rt, events, _ := watched(t, runtime.RestartNo, sim.Options{})
	all, err := rt.Watch(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: "other", Image: imgRunning, Labels: map[string]string{"app": "other"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(t.Context(), other); err != nil {
		t.Fatal(err)
	}
	if err := rt.Crash("api", 2, false); err != nil {
		t.Fatal(err)
	}
	if got := pending(events); !slices.Equal(got, []string{"start", "died:2"}) {
		t.Errorf("the app=api watch delivered %v, want api's start and death only", got)
	}
	var names []string
	for _, e := range drainEvents(all) {
		names = append(names, e.Name+" "+describe(e))
	}
	if want := []string{"other start", "api died:2"}; !slices.Equal(names, want) {
		t.Errorf("the unfiltered watch delivered %v, want %v", names, want)
	}
}

func drainEvents(events <-chan runtime.ContainerEvent) []runtime.ContainerEvent {
	var out []runtime.ContainerEvent
	for {
		select {
		case e := <-events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func TestEventsCarryTheContainerAndTheClock(t *testing.T) {
	now := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	rt, events, id := watched(t, runtime.RestartNo, sim.Options{Now: func() time.Time { return now }})
	e := <-events
	if e.ID != id || e.Name != "api" || e.Kind != runtime.EventStart || !e.Time.Equal(now) {
		t.Errorf("the start event is %+v, want api's ID, name, kind start at %s", e, now)
	}
	if err := rt.Crash(id, 3, false); err != nil {
		t.Fatal(err)
	}
	if e := <-events; e.Kind != runtime.EventDied || e.ExitCode != 3 || e.ID != id {
		t.Errorf("the death event is %+v, want died with code 3", e)
	}
}

func TestHealthChecksAreWatched(t *testing.T) {
	rt := sim.New(sim.Options{LocalImages: []string{imgRunning}})
	events, err := rt.Watch(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &runtime.HealthCheck{Command: []string{"false"}, Interval: time.Hour, Retries: 2}
	id, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: "hc", Image: imgRunning, HealthCheck: hc})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := rt.RunHealthCheck(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := pending(events), []string{"start", "health:starting", "health:unhealthy"}; !slices.Equal(got, want) {
		t.Errorf("the watch delivered %v, want %v", got, want)
	}
}

func TestAWatchThatFallsBehindLosesTheOldestAndIsToldSo(t *testing.T) {
	rt, events, id := watched(t, runtime.RestartAlways, sim.Options{})
	for range runtime.WatchBuffer {
		if err := rt.Crash(id, 1, false); err != nil {
			t.Fatal(err)
		}
	}
	got := pending(events)
	if len(got) != runtime.WatchBuffer || !slices.Contains(got, "lost") || got[len(got)-1] != "start" {
		t.Errorf("after %d crashes unread the watch holds %d events %v…, want %d with a lost one and the newest (start) last",
			runtime.WatchBuffer, len(got), got[:min(4, len(got))], runtime.WatchBuffer)
	}
}

func TestAWatchIsClosedWhenItsContextEnds(t *testing.T) {
	rt := sim.New(sim.Options{LocalImages: []string{imgRunning}})
	ctx, cancel := context.WithCancel(t.Context())
	events, err := rt.Watch(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	testenv.Eventually(t, "the watch's channel is closed", 5*time.Second, func() bool {
		return slices.Contains(pending(events), "closed")
	})
	if _, err := rt.Watch(ctx, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("Watch with an ended context: %v, want context.Canceled", err)
	}
	// Events after the end go nowhere, without blocking or panicking.
	id, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: "after", Image: imgRunning})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(t.Context(), id); err != nil {
		t.Fatal(err)
	}
}

func TestAnEngineGoingDownEndsEveryWatchWithALostEvent(t *testing.T) {
	tests := []struct {
		name string
		down func(*sim.Runtime)
	}{
		{"an unavailable engine", func(rt *sim.Runtime) { rt.SetUnavailable(true) }},
		{"a reboot", func(rt *sim.Runtime) { rt.Reboot() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt, events, _ := watched(t, runtime.RestartAlways, sim.Options{})
			tt.down(rt)
			if got, want := pending(events), []string{"start", "lost", "closed"}; !slices.Equal(got, want) {
				t.Errorf("the watch delivered %v, want %v", got, want)
			}
		})
	}
	t.Run("an unavailable engine cannot be watched", func(t *testing.T) {
		rt := sim.New(sim.Options{})
		rt.SetUnavailable(true)
		if _, err := rt.Watch(t.Context(), nil); !errors.Is(err, runtime.ErrUnavailable) {
			t.Errorf("Watch: %v, want ErrUnavailable", err)
		}
	})
}

func TestLogsReturnTheLastLinesPrinted(t *testing.T) {
	rt := sim.New(sim.Options{LocalImages: []string{imgRunning}, Behave: func(runtime.ContainerSpec) sim.Behaviour {
		return sim.Behaviour{Output: []string{"starting", "listening on :8080"}}
	}})
	id, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: "api", Image: imgRunning, RestartPolicy: runtime.RestartAlways})
	if err != nil {
		t.Fatal(err)
	}
	if lines, err := rt.Logs(t.Context(), id, 10); err != nil || len(lines) != 0 {
		t.Errorf("a container never started printed %q, %v; want nothing", lines, err)
	}
	if err := rt.Start(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	if err := rt.Print(id, "panic: boom"); err != nil {
		t.Fatal(err)
	}
	if err := rt.Crash(id, 2, false); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		tail int
		want []string
	}{
		{"a tail returns the last lines, oldest first", 3, []string{"panic: boom", "starting", "listening on :8080"}},
		{"a tail longer than the log returns it all", 50, []string{"starting", "listening on :8080", "panic: boom", "starting", "listening on :8080"}},
		{"no tail returns it all", 0, []string{"starting", "listening on :8080", "panic: boom", "starting", "listening on :8080"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lines, err := rt.Logs(t.Context(), "api", tt.tail)
			if err != nil || !slices.Equal(lines, tt.want) {
				t.Errorf("Logs(tail %d) = %q, %v; want %q", tt.tail, lines, err, tt.want)
			}
		})
	}
	if _, err := rt.Logs(t.Context(), "missing", 1); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("Logs of a missing container: %v, want ErrNotFound", err)
	}
}

func TestLogsKeepABoundedNumberOfLines(t *testing.T) {
	rt := sim.New(sim.Options{LocalImages: []string{imgRunning}})
	id, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: "chatty", Image: imgRunning})
	if err != nil {
		t.Fatal(err)
	}
	for i := range sim.MaxLogLines + 5 {
		if err := rt.Print(id, fmt.Sprint("line ", i)); err != nil {
			t.Fatal(err)
		}
	}
	lines, err := rt.Logs(t.Context(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) != sim.MaxLogLines || lines[0] != "line 5" {
		t.Errorf("kept %d lines from %q, want %d from line 5", len(lines), lines[0], sim.MaxLogLines)
	}
}

func TestTheImageDigestIsPinnedOrDerivedFromTheReference(t *testing.T) {
	tests := []struct {
		name string
		ref  string
		want func(string) bool
	}{
		{"a pinned reference reports its digest", "reg.example/api@sha256:0123", func(d string) bool { return d == "sha256:0123" }},
		{"a tag reports a sha256 of the reference", "reg.example/api:v1", func(d string) bool {
			return strings.HasPrefix(d, "sha256:") && len(d) == len("sha256:")+64 && d != sim.ImageDigest("reg.example/api:v2")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := sim.New(sim.Options{LocalImages: []string{tt.ref}})
			id, err := rt.Create(t.Context(), runtime.ContainerSpec{Name: "c", Image: tt.ref})
			if err != nil {
				t.Fatal(err)
			}
			c, err := rt.Inspect(t.Context(), id)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(c.ImageDigest) {
				t.Errorf("the digest of %s is %q", tt.ref, c.ImageDigest)
			}
		})
	}
}

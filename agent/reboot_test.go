package agent_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// After a reboot Podman's refresh (libpod resetContainerState) leaves every
// container that ran during the last boot exited, keeping its last exit
// code, and one that never started configured ("created"); nothing starts
// them without podman-restart.service. The simulated runtime's Reboot puts
// its containers in exactly those states; its Exit ends one service with a
// chosen code and acts on its restart policy at once, as Podman does.

func TestAnExitedServiceIsRestartedPerItsRestartPolicy(t *testing.T) {
	tests := []struct {
		name     string
		policy   score.RestartPolicy
		exitCode int
		// restarted: the same container runs again after the pass (the
		// engine restarted it); otherwise it stays exited and the pass is
		// a *ServiceDownError.
		restarted bool
	}{
		{"always is started again after exit code 0", "always", 0, true},
		{"unless-stopped is started again after SIGTERM", "unless-stopped", 143, true},
		{"an unset policy is unless-stopped and is started again", "", 0, true},
		{"on-failure is started again after a non-zero exit code", "on-failure", 137, true},
		{"on-failure after exit code 0 stays down and is reported", "on-failure", 0, false},
		{"no after a non-zero exit code stays down and is reported", "no", 3, false},
		{"no after exit code 0 stays down and is reported: a service is long-running", "no", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			s := baseScore()
			s.Data.Services[1].RestartPolicy = tt.policy
			if err := w.r.Apply(w.ctx, entry(t, 1, s)); err != nil {
				t.Fatal(err)
			}
			before := w.containers()
			if err := w.rt.Exit("worker", tt.exitCode); err != nil {
				t.Fatal(err)
			}
			err := w.r.Apply(w.ctx, entry(t, 1, s))
			after := w.containers()
			for name, c := range before {
				if after[name].ID != c.ID {
					t.Errorf("%s was replaced", name)
				}
			}
			if after["api"].State != runtime.StateRunning {
				t.Error("api is not running")
			}
			if tt.restarted {
				if err != nil || after["worker"].State != runtime.StateRunning {
					t.Errorf("got %v, worker %s; want it running again", err, after["worker"].State)
				}
				return
			}
			var down *agent.ServiceDownError
			if !errors.As(err, &down) || down.Name != "worker" || down.ExitCode != tt.exitCode || down.RestartPolicy != string(tt.policy) {
				t.Fatalf("got %v, want a ServiceDownError for worker, exit code %d, policy %s", err, tt.exitCode, tt.policy)
			}
			for _, want := range []string{"service worker is down", "exited with code", `restart_policy "` + string(tt.policy) + `" keeps it down`, "init_container"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
			if after["worker"].State != runtime.StateExited {
				t.Errorf("worker %s; its policy keeps it down", after["worker"].State)
			}
		})
	}
}

func TestAfterASimulatedRebootServicesRunAgainAndAnInterruptedInitContainerReruns(t *testing.T) {
	var hang atomic.Bool // the init container runs until the host goes down
	w := newWorld(t, func(o *sim.Options) {
		o.Now = time.Now
		behave := o.Behave
		o.Behave = func(spec runtime.ContainerSpec) sim.Behaviour {
			if spec.Labels[agent.LabelRole] == "init" && hang.Load() {
				return sim.Behaviour{}
			}
			return behave(spec)
		}
	})
	s := baseScore()
	s.Data.Services = append(s.Data.Services,
		score.Service{Name: "always", Image: "reg.example/worker:v1", RestartPolicy: "always"},
		score.Service{Name: "onfail", Image: "reg.example/worker:v1", RestartPolicy: "on-failure"},
		score.Service{Name: "once", Image: "reg.example/worker:v1", RestartPolicy: "no"})
	if err := w.r.Apply(w.ctx, entry(t, 1, s)); err != nil {
		t.Fatal(err)
	}
	before := w.containers()
	w.rt.Reboot()
	for name, c := range w.containers() {
		if name != "migrate" && (c.State != runtime.StateExited || c.ExitCode != 0 || !c.ExitUnrecorded()) {
			t.Fatalf("%s after the reboot: %+v, want exited 0 with no exit recorded", name, c)
		}
	}

	t.Run("each service its policy restarts runs again, the same container; one with policy no is reported down", func(t *testing.T) {
		err := w.r.Apply(w.ctx, entry(t, 1, s))
		var down *agent.ServiceDownError
		if !errors.As(err, &down) || down.Name != "once" || down.RestartPolicy != "no" {
			t.Fatalf("got %v, want a ServiceDownError for once alone", err)
		}
		after := w.containers()
		for _, name := range []string{"api", "worker", "always", "onfail"} {
			if after[name].ID != before[name].ID || after[name].State != runtime.StateRunning {
				t.Errorf("%s: %+v, want the same container running again", name, after[name])
			}
		}
		if after["migrate"].ID != before["migrate"].ID {
			t.Error("the init container that completed before the reboot was rerun")
		}
	})
	t.Run("an init container running when the host went down is run again, not taken for completed", func(t *testing.T) {
		next := s
		next.Data.Services = next.Data.Services[:2]
		ctx, cancel := context.WithCancel(w.ctx)
		defer cancel()
		hang.Store(true)
		w.r.Runtime = newCanceller(w.rt, "wait migrate", cancel)
		if err := w.r.Apply(ctx, entry(t, 2, next)); !errors.Is(err, context.Canceled) {
			t.Fatalf("the pass the reboot interrupts returned %v", err)
		}
		interrupted := w.containers()["migrate"]
		w.rt.Reboot()
		hang.Store(false)
		w.r.Runtime = w.rt
		if err := w.r.Apply(w.ctx, entry(t, 2, next)); err != nil {
			t.Fatal(err)
		}
		after := w.containers()
		if c := after["migrate"]; c.ID == interrupted.ID || c.State != runtime.StateExited || c.ExitCode != 0 || c.ExitUnrecorded() {
			t.Errorf("init container %+v, want a new one that ran to exit 0 (the interrupted one was %s)", c, interrupted.ID)
		}
		for _, name := range []string{"api", "worker"} {
			if after[name].State != runtime.StateRunning || after[name].Labels[agent.LabelRevision] != after["migrate"].Labels[agent.LabelRevision] {
				t.Errorf("%s: %+v", name, after[name])
			}
		}
	})
}

// TestADownServiceIsReportedFailedNotConverged: the daemon reports a
// *ServiceDownError as a failure.
func TestADownServiceIsReportedFailedNotConverged(t *testing.T) {
	e := startAgent(t)
	s := baseScore()
	s.Data.Services[1].RestartPolicy = "no"
	s.Data.Services[1].Image = "reg.example/worker-exit-3:v1"
	e.world.rt.AddImage("reg.example/worker-exit-3:v1")
	e.put(entry(t, 1, s))
	st := e.waitStatus(1, events.WorkloadFailed)
	if !strings.Contains(st.Error, "service worker is down: it exited with code 3") {
		t.Errorf("failed report %q does not say which service is down", st.Error)
	}
	for _, s := range e.statuses() {
		if s.Phase == events.WorkloadConverged {
			t.Errorf("converged was reported while worker was down: %+v", s)
		}
	}
}

// ignoresTermFile's sleep, as PID 1, ignores SIGTERM: a stop with no grace
// ends it by SIGKILL, exit code 137.
const ignoresTermFile = "CMD [\"sleep\", \"3600\"]\n"

// TestServicesRunAgainAfterARebootOnRealPodman approximates a reboot on the
// shared Podman service, which cannot be rebooted: at boot libpod's refresh
// (resetContainerState) puts every container that ran during the last boot
// in the exited state, keeping its last exit code (0 for one that was still
// running), and one that never started in the configured ("created")
// state; without podman-restart.service nothing starts them. The test
// stops each service with `podman stop` while no pass runs — exited with
// 0, or 137 for one killed because it ignores SIGTERM — which Podman
// records as stopped by the user, so its own restart policy does not bring
// it back either, as at boot; and it replaces one service by a container
// with the same spec and labels that never started, as a container created
// but not started before the power went off. Then one pass must bring back
// every service its restart policy restarts, and report the one it keeps
// down.
func TestServicesRunAgainAfterARebootOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	w.r.StopTimeout = 2 * time.Second
	runs := podmantest.BuildImage(t, "runs", runsFile)
	deaf := podmantest.BuildImage(t, "ignores-term", ignoresTermFile)
	svcs := []struct {
		name   string
		image  string
		policy score.RestartPolicy
		// never: the service is left configured, never started.
		never bool
		// exitCode is what the stop leaves.
		exitCode int
		up       bool
	}{
		{"always", runs, "always", false, 0, true},
		{"unless", runs, "unless-stopped", false, 0, true},
		{"onfail", deaf, "on-failure", false, 137, true},
		{"never", runs, "unless-stopped", true, 0, true},
		{"once", runs, "no", false, 0, false},
	}
	s := score.Score{Data: score.PodmanV0{}}
	for _, sv := range svcs {
		s.Data.Services = append(s.Data.Services, score.Service{Name: w.name(sv.name), Image: sv.image, RestartPolicy: sv.policy})
	}
	if err := w.r.Apply(w.ctx, w.entry(1, s)); err != nil {
		t.Fatal(err)
	}
	before := w.byName()
	for _, sv := range svcs {
		c := before[w.name(sv.name)]
		if sv.never {
			if err := w.rt.Remove(w.ctx, c.ID, true); err != nil {
				t.Fatal(err)
			}
			id, err := w.rt.Create(w.ctx, runtime.ContainerSpec{Name: c.Name, Image: sv.image, Labels: c.Labels, RestartPolicy: string(sv.policy)})
			if err != nil {
				t.Fatal(err)
			}
			c.ID = id
			before[c.Name] = c
			continue
		}
		grace := w.r.StopTimeout
		if sv.exitCode == 137 {
			grace = 0
		}
		if err := w.rt.Stop(w.ctx, c.ID, grace); err != nil {
			t.Fatal(err)
		}
		if got, err := w.rt.Inspect(w.ctx, c.ID); err != nil || got.State != runtime.StateExited || got.ExitCode != sv.exitCode ||
			got.FinishedAt.IsZero() || got.ExitUnrecorded() {
			t.Fatalf("%s after the stop: %+v, %v; want exited %d, the exit recorded", sv.name, got, err, sv.exitCode)
		}
		if listed := w.byName()[c.Name]; listed.FinishedAt.IsZero() || listed.ExitUnrecorded() {
			t.Fatalf("%s as listed after the stop: %+v; want the exit recorded", sv.name, listed)
		}
	}

	err := w.r.Apply(w.ctx, w.entry(1, s))
	var down *agent.ServiceDownError
	if !errors.As(err, &down) || down.Name != w.name("once") || down.ExitCode != 0 || down.RestartPolicy != "no" {
		t.Fatalf("got %v, want a ServiceDownError for %s only", err, w.name("once"))
	}
	after := w.byName()
	for _, sv := range svcs {
		c := after[w.name(sv.name)]
		if c.ID != before[w.name(sv.name)].ID {
			t.Errorf("%s was replaced; want the same container started again", sv.name)
		}
		if up := c.State == runtime.StateRunning; up != sv.up {
			t.Errorf("%s (restart_policy %q) is %s, want running %v", sv.name, sv.policy, c.State, sv.up)
		}
	}
}

package agent_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/score"
)

// After a reboot Podman's refresh (libpod resetContainerState) leaves every
// container that ran during the last boot exited, keeping its last exit
// code, and one that never started configured ("created"); nothing starts
// them without podman-restart.service. The simulated runtime's Exit puts a
// service in the first state; the second is
// TestACrashBetweenCreateAndStartIsRepairedWithoutADuplicate's.

func TestAnExitedServiceIsRestartedPerItsRestartPolicy(t *testing.T) {
	tests := []struct {
		name     string
		policy   score.RestartPolicy
		exitCode int
		// restarted: the pass starts the same container again; otherwise
		// it stays exited and the pass is a *ServiceDownError.
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

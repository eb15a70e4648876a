package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// The health gate on real Podman (ADR 0016): Podman here runs without
// systemd, so no health check runs unless the agent runs it; these tests
// pass only because the agent drives the checks itself.

// failingCheck prints a line and fails.
var failingCheck = []string{"/bin/sh", "-c", "echo database not reachable; exit 1"}

func TestHealthGateOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	runs := podmantest.BuildImage(t, "runs", runsFile)
	withCheck := func(hc *score.Healthcheck) score.Score {
		return score.Score{Data: score.PodmanV0{Services: []score.Service{
			{Name: w.name("api"), Image: runs, Healthcheck: hc},
			{Name: w.name("sidecar"), Image: runs}, // no check: converges as before
		}}}
	}
	inspect := func(t *testing.T, name string) runtime.Container {
		t.Helper()
		c, err := w.rt.Inspect(w.ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	t.Run("a service whose check passes converges once Podman shows it healthy", func(t *testing.T) {
		s := withCheck(&score.Healthcheck{Command: []string{"/bin/true"}, Interval: "1s", Retries: 2})
		if err := w.r.Apply(w.ctx, w.entry(1, s)); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		c := inspect(t, w.name("api"))
		if c.Health == nil || c.Health.Status != runtime.HealthHealthy || c.Health.Checks == 0 {
			t.Errorf("after Apply the service's health is %+v, want healthy after a check", c.Health)
		}
		if c := inspect(t, w.name("sidecar")); c.Health != nil || c.State != runtime.StateRunning {
			t.Errorf("the service without a check: state %s, health %+v; want running without health", c.State, c.Health)
		}
	})

	t.Run("a changed check replaces the container", func(t *testing.T) {
		before := inspect(t, w.name("api")).ID
		s := withCheck(&score.Healthcheck{Command: []string{"/bin/true"}, Interval: "2s", Retries: 2})
		if err := w.r.Apply(w.ctx, w.entry(2, s)); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if after := inspect(t, w.name("api")).ID; after == before {
			t.Error("the service with a changed health check kept its container")
		}
	})

	t.Run("a service whose check fails is unhealthy after its start period, naming the service and the check's output", func(t *testing.T) {
		const startPeriod = 2 * time.Second
		s := withCheck(&score.Healthcheck{Command: failingCheck, Interval: "1s", Retries: 2, StartPeriod: "2s"})
		err := w.r.Apply(w.ctx, w.entry(3, s))
		var ue *agent.UnhealthyError
		if !errors.As(err, &ue) {
			t.Fatalf("Apply: %v, want an *UnhealthyError", err)
		}
		if ue.Name != w.name("api") || ue.FailingStreak < 2 {
			t.Errorf("got %+v, want service %s after 2 failures in a row", ue, w.name("api"))
		}
		for _, want := range []string{"service " + w.name("api") + " is unhealthy", `"database not reachable"`, "fix the service"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error lacks %q:\n%v", want, err)
			}
		}
		// Podman's rule: failures within the start period do not count,
		// so the deciding check ended after it.
		c := inspect(t, w.name("api"))
		if c.Health == nil || c.Health.Status != runtime.HealthUnhealthy {
			t.Fatalf("Podman shows health %+v, want unhealthy", c.Health)
		}
		if got := c.Health.LastEnd.Sub(c.StartedAt); got < startPeriod {
			t.Errorf("unhealthy %s after the start, within the start period of %s", got, startPeriod)
		}
		if c.State != runtime.StateRunning {
			t.Errorf("the unhealthy service is %s, want left running", c.State)
		}
	})

	t.Run("the next pass reports the same failure without replacing the container", func(t *testing.T) {
		id := inspect(t, w.name("api")).ID
		s := withCheck(&score.Healthcheck{Command: failingCheck, Interval: "1s", Retries: 2, StartPeriod: "2s"})
		var ue *agent.UnhealthyError
		if err := w.r.Apply(w.ctx, w.entry(3, s)); !errors.As(err, &ue) {
			t.Fatalf("Apply: %v, want an *UnhealthyError", err)
		}
		if inspect(t, w.name("api")).ID != id {
			t.Error("the pass replaced the unhealthy container")
		}
	})
}

// TestAFailingCheckNeverShowsASecretOnRealPodman: a check that prints a
// secret_env value reports its output with the value replaced.
func TestAFailingCheckNeverShowsASecretOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	w.r.Secrets = secrets{"lab/db#password": secretValue}
	runs := podmantest.BuildImage(t, "runs", runsFile)
	s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: runs,
		SecretEnv:   []score.SecretEnv{{Name: "DB_PASSWORD", Secret: "lab/db", Key: "password"}},
		Healthcheck: &score.Healthcheck{Command: []string{"/bin/sh", "-c", "echo login with $DB_PASSWORD refused; exit 1"}, Interval: "1s", Retries: 1},
	}}}}
	err := w.r.Apply(w.ctx, w.entry(1, s))
	var ue *agent.UnhealthyError
	if !errors.As(err, &ue) {
		t.Fatalf("Apply: %v, want an *UnhealthyError", err)
	}
	if strings.Contains(err.Error(), secretValue) {
		t.Fatal("the error shows the secret value")
	}
	if !strings.Contains(err.Error(), `"login with *** refused"`) {
		t.Errorf("the error lacks the redacted output:\n%v", err)
	}
}

// TestTheAgentReportsHealthOnRealPodman: through the daemon, a revision
// whose check fails is reported Applying, then Failed naming the service,
// and never Converged; the next revision, whose check passes, converges.
func TestTheAgentReportsHealthOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	runs := podmantest.BuildImage(t, "runs", runsFile)
	d := w.runDaemon(t, agent.Options{})
	put, reports := d.put, d.reports
	last := func(gen int64) events.WorkloadStatus {
		rs := reports(gen)
		if len(rs) == 0 {
			return events.WorkloadStatus{}
		}
		return rs[len(rs)-1]
	}
	service := func(hc *score.Healthcheck) score.Score {
		return score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: runs, Healthcheck: hc}}}}
	}

	put(1, service(&score.Healthcheck{Command: failingCheck, Interval: "1s", Retries: 2, StartPeriod: "1s"}))
	testenv.Eventually(t, "generation 1 to be reported failed", testTimeout(t), func() bool {
		return last(1).Phase == events.WorkloadFailed
	})
	var phases []events.WorkloadPhase
	for _, ws := range reports(1) {
		phases = append(phases, ws.Phase)
		if ws.Phase == events.WorkloadConverged {
			t.Error("generation 1, whose check fails, was reported converged")
		}
	}
	if len(phases) < 2 || phases[0] != events.WorkloadApplying {
		t.Errorf("generation 1 was reported %v, want Applying first, then Failed", phases)
	}
	failure := last(1).Error
	for _, want := range []string{"service " + w.name("api") + " is unhealthy", "database not reachable"} {
		if !strings.Contains(failure, want) {
			t.Errorf("the failure lacks %q: %s", want, failure)
		}
	}

	put(2, service(&score.Healthcheck{Command: []string{"/bin/true"}, Interval: "1s", Retries: 2}))
	testenv.Eventually(t, "generation 2 to be reported converged", testTimeout(t), func() bool {
		return last(2).Phase == events.WorkloadConverged
	})
	if c, err := w.rt.Inspect(w.ctx, w.name("api")); err != nil || c.Health == nil || c.Health.Status != runtime.HealthHealthy {
		t.Errorf("the converged service: %+v, %v; want healthy", c.Health, err)
	}
}

// TestACheckThatStartsFailingIsNoticedByLaterPassesOnRealPodman: after a
// revision converged, each later pass (the resync) runs the check when one
// is due; once retries of them failed in a row the pass fails, and once
// the check passes again the pass converges.
func TestACheckThatStartsFailingIsNoticedByLaterPassesOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	runs := podmantest.BuildImage(t, "runs", runsFile)
	dir := t.TempDir()
	marker := filepath.Join(dir, "ok")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: runs,
		Volumes:     []score.Volume{{HostPath: dir, ContainerPath: "/probe", ReadOnly: true}},
		Healthcheck: &score.Healthcheck{Command: []string{"/bin/sh", "-c", "test -f /probe/ok || { echo marker gone; exit 1; }"}, Interval: "1s", Retries: 2},
	}}}}
	if err := w.r.Apply(w.ctx, w.entry(1, s)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := os.Remove(marker); err != nil {
		t.Fatal(err)
	}
	var last error
	testenv.Eventually(t, "a pass to find the service unhealthy", testTimeout(t), func() bool {
		last = w.r.Apply(w.ctx, w.entry(1, s))
		var ue *agent.UnhealthyError
		return errors.As(last, &ue)
	})
	if !strings.Contains(last.Error(), "marker gone") {
		t.Errorf("the failure lacks the check's output: %v", last)
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "a pass to find the service healthy again", testTimeout(t), func() bool {
		last = w.r.Apply(w.ctx, w.entry(1, s))
		return last == nil
	})
}

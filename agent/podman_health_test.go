package agent_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// The watch on real Podman (ADR 0019): Podman restarts the service by its
// policy; the agent learns of each death from Podman's events (or its
// list), and reads the service's last lines with Podman's logs.

// crashFile prints a line with the secret, then boom, and exits with 2.
const crashFile = "CMD [\"sh\", \"-c\", \"echo \\\"login with $DB_PASSWORD refused\\\"; echo boom; exit 2\"]\n"

// health lists the device's health reports of w's Deployment.
func (d *podmanDaemon) health() []events.WorkloadHealth {
	var out []events.WorkloadHealth
	for r, err := range d.st.Replay(d.w.ctx, "fleet.report."+d.w.device+".health", events.FromStart()) {
		if err != nil {
			return out
		}
		if wh, err := events.Decode[events.WorkloadHealth](r.Event); err == nil && wh.Namespace == d.w.ns {
			out = append(out, wh)
		}
	}
	return out
}

// crashLoop runs a Deployment whose service crash-loops under
// unless-stopped and waits for its Degraded report.
func crashLoop(t *testing.T) (*podmanWorld, events.WorkloadHealth) {
	w := newPodmanWorld(t)
	w.r.Secrets = secrets{"lab/db#password": secretValue}
	img := podmantest.BuildImage(t, "crash", crashFile)
	d := w.runDaemon(t, agent.Options{StateDir: t.TempDir()})
	d.put(1, score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: img,
		RestartPolicy: "unless-stopped", SecretEnv: []score.SecretEnv{{Name: "DB_PASSWORD", Secret: "lab/db", Key: "password"}}}}}})
	testenv.Eventually(t, "generation 1 converges (the service is restarted by its policy)", testTimeout(t), func() bool {
		return d.reported(1, events.WorkloadConverged)
	})
	var rep events.WorkloadHealth
	testenv.Eventually(t, "a Degraded report", testTimeout(t), func() bool {
		for _, wh := range d.health() {
			if wh.EventType() == events.TypeWorkloadDegraded {
				rep = wh
				return true
			}
		}
		return false
	})
	return w, rep
}

func TestACrashLoopIsDegradedOnRealPodman(t *testing.T) {
	w, rep := crashLoop(t)
	if rep.Reason != events.HealthCrashLoop || rep.Generation != 1 || len(rep.Services) != 1 {
		t.Fatalf("report %+v", rep)
	}
	s := rep.Services[0]
	if s.Name != w.name("api") || s.ExitCode != 2 || s.Restarts < 3 || s.RestartsTotal < 2 {
		t.Errorf("service %+v, want %s exited with code 2, 3 deaths or more", s, w.name("api"))
	}
	if !slices.Contains(s.Logs, "boom") {
		t.Errorf("logs %q lack the service's last line", s.Logs)
	}
}

func TestLogsAreRedactedOnRealPodman(t *testing.T) {
	_, rep := crashLoop(t)
	logs := rep.Services[0].Logs
	if strings.Contains(strings.Join(logs, "\n"), secretValue) {
		t.Fatal("the logs show the secret value")
	}
	if !slices.Contains(logs, "login with *** refused") {
		t.Errorf("logs %q lack the redacted line", logs)
	}
}

// passesOnce is a health check that passes the first time it runs, then
// fails: the service turns unhealthy after it converged, whatever the
// machine's speed.
var passesOnce = []string{"sh", "-c", "test ! -f /tmp/checked && touch /tmp/checked"}

// TestAServiceThatTurnsUnhealthyIsDegradedOnRealPodman: Podman here runs
// no check after the health gate (no systemd); the agent runs the check
// when it is due, at most every 30 s, and reports the Deployment Degraded
// once Podman says unhealthy.
func TestAServiceThatTurnsUnhealthyIsDegradedOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	img := podmantest.BuildImage(t, "runs", runsFile)
	d := w.runDaemon(t, agent.Options{StateDir: t.TempDir()})
	d.put(1, score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: img,
		Healthcheck: &score.Healthcheck{Command: passesOnce, Interval: "1s", Retries: 1}}}}})
	testenv.Eventually(t, "generation 1 converges once healthy", testTimeout(t), func() bool { return d.reported(1, events.WorkloadConverged) })
	var rep events.WorkloadHealth
	testenv.Eventually(t, "a Degraded report", testTimeout(t), func() bool {
		for _, wh := range d.health() {
			if wh.EventType() == events.TypeWorkloadDegraded {
				rep = wh
				return true
			}
		}
		return false
	})
	if rep.Reason != events.HealthUnhealthy || len(rep.Services) != 1 || rep.Services[0].Health != "unhealthy" || rep.Services[0].State != "running" {
		t.Errorf("report %+v", rep)
	}
}

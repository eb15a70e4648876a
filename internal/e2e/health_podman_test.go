package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/podman"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// crashLoopFile is the service: it exits with code 2 at start when
// DB_PASSWORD is not set, and otherwise runs until stopped.
const crashLoopFile = `CMD ["sh", "-c", "trap 'exit 0' TERM; echo starting; test -n \"$DB_PASSWORD\" || { echo 'fatal: DB_PASSWORD is not set'; exit 2; }; sleep 3600 & wait"]` + "\n"

// TestTheCrashLoopIsDegradedOnARealPodmanAgent is the crash loop
// on real Podman: the service exits with code 2 at start and Podman
// restarts it (unless-stopped). The rollout succeeds; the Deployment's
// Degraded condition, read with kubectl, names the device and exit code 2
// within a minute of the death that made the agent report it (its exit
// time, on the same machine's clock), and the report carries the
// service's last line. A revision that sets the variable converges and
// clears it.
func TestTheCrashLoopIsDegradedOnARealPodmanAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	podmantest.Connect(t)
	sock, err := podmantest.SocketPath()
	if err != nil {
		t.Fatal(err)
	}
	image := podmantest.BuildImage(t, "e2e-crashloop", crashLoopFile)
	e := newHealthEnv(t, ctx, "podman-crash")
	dev := e.ns + "-1"
	e.kubectl(fmt.Sprintf("apiVersion: fleet.nationtech.io/v1alpha1\nkind: Device\nmetadata: {name: %s, labels: {app: %s}}\nspec: {identitySubject: \"sub-%s\"}\n",
		dev, e.ns, dev), "apply", "-n", e.ns, "-f", "-")
	rt, err := podman.New(ctx, podman.Options{URI: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, e.nsrv, nats.CustomInboxPrefix("_INBOX_"+dev))
	log := quietLogger()
	rec := &agent.Reconciler{Runtime: rt, Log: log, StopTimeout: 10 * time.Second}
	agCtx, stopAgent := context.WithCancel(ctx)
	agDone := make(chan error, 1)
	go func() {
		agDone <- agent.Run(agCtx, agent.Options{Device: dev, Conn: nc, Reconciler: rec, Logger: log, StateDir: t.TempDir()})
	}()
	defer func() {
		stopAgent()
		<-agDone
		if err := rec.Remove(context.Background(), e.ns, "crashloop"); err != nil {
			t.Errorf("remove the Deployment's containers: %v", err)
		}
	}()

	service := "crashloop-" + fmt.Sprint(os.Getpid())
	manifest := func(env string) string {
		return fmt.Sprintf(`apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata: {name: crashloop}
spec:
  targetSelector: {matchLabels: {app: %s}}
  score: {type: PodmanV0, data: {services: [{name: %s, image: "%s", restart_policy: unless-stopped, env: [%s]}]}}
`, e.ns, service, image, env)
	}
	e.kubectl(manifest(""), "apply", "-n", e.ns, "-f", "-")
	e.waitFor("crashloop", "succeed", fieldIs("Succeeded", "status", "phase"))

	subject, err := events.ReportSubject(dev, events.ReportHealth)
	if err != nil {
		t.Fatal(err)
	}
	var degraded events.WorkloadHealth
	testenv.EventuallyErr(t, "the device's Degraded report", 3*time.Minute, func() error {
		for rec, err := range e.st.Replay(ctx, subject, events.FromStart()) {
			if err != nil {
				return err
			}
			if rec.Event.Type == events.TypeWorkloadDegraded {
				degraded, err = events.Decode[events.WorkloadHealth](rec.Event)
				return err
			}
		}
		return fmt.Errorf("no Degraded report on %s", subject)
	})
	if len(degraded.Services) != 1 || degraded.Services[0].ExitCode != 2 || degraded.Services[0].ExitedAt == nil {
		t.Fatalf("Degraded report %+v, want the service's exit code 2 and exit time", degraded)
	}
	if s := degraded.Services[0]; degraded.Reason != events.HealthCrashLoop || s.Restarts < 3 || !strings.Contains(strings.Join(s.Logs, "\n"), "fatal: DB_PASSWORD is not set") {
		t.Errorf("Degraded report %+v, want CrashLoop, 3 deaths or more and the service's last line", degraded)
	}
	third := *degraded.Services[0].ExitedAt
	testenv.EventuallyErr(t, "Degraded True in kubectl", time.Minute, func() error {
		if c := e.condition("crashloop", "Degraded", 1); !strings.HasPrefix(c, "True ServicesDegraded ") ||
			!strings.Contains(c, dev+" ("+service+": CrashLoop, exited with code 2") {
			return fmt.Errorf("Degraded of generation 1 is %q", c)
		}
		return nil
	})
	if took := time.Since(third); took > time.Minute {
		t.Errorf("Degraded was in kubectl %s after the death that made it, want under a minute", took)
	}
	if phase := strings.TrimSpace(e.kubectl("", "get", "fdeploy/crashloop", "-n", e.ns, "-o", "jsonpath={.status.phase}")); phase != "Succeeded" {
		t.Errorf("phase %s: health never rewrites a rollout that succeeded", phase)
	}

	e.kubectl(manifest("{name: DB_PASSWORD, value: fixed}"), "apply", "-n", e.ns, "-f", "-")
	e.waitFor("crashloop", "become Ready", conditionIs("Ready", "True"))
	testenv.EventuallyErr(t, "Degraded False for generation 2", 30*time.Second, func() error {
		if c := e.condition("crashloop", "Degraded", 2); !strings.HasPrefix(c, "False NoDegradedDevices ") {
			return fmt.Errorf("Degraded of generation 2 is %q", c)
		}
		return nil
	})
}

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// crashOutput is what the crash-looping image prints at each start: the
// issue's service, which exits with code 2 when an environment variable is
// missing.
var crashOutput = []string{"starting api", "fatal: DB_PASSWORD is not set"}

// crashingEngine is a simulated engine with images v1 (prints crashOutput)
// and v2 of registry.example.com/<name>, and a clock for the containers'
// start and exit times.
func crashingEngine(name string) (rt *sim.Runtime, v1, v2 string) {
	v1, v2 = "registry.example.com/"+name+":v1", "registry.example.com/"+name+":v2"
	return sim.New(sim.Options{LocalImages: []string{v1, v2}, Now: time.Now, Behave: func(spec runtime.ContainerSpec) sim.Behaviour {
		b := sim.DefaultBehaviour(spec)
		if spec.Image == v1 {
			b.Output = crashOutput
		}
		return b
	}}), v1, v2
}

// deploymentHistory is `fleet history deployment <ns>/<name>` as text.
func (e *healthEnv) deploymentHistory(name string) (string, error) {
	h, err := history.New(history.Options{Reader: e.st})
	if err != nil {
		return "", err
	}
	tl, err := h.Deployment(e.ctx, e.ns, name)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	err = history.Write(&b, tl, history.FormatText)
	return b.String(), err
}

// jsonpath reads one field of the Deployment with kubectl.
func (e *healthEnv) jsonpath(name, path string) string {
	return strings.TrimSpace(e.kubectl("", "get", "fdeploy/"+name, "-n", e.ns, "-o", "jsonpath="+path))
}

// lastSequence is the stream sequence of the device's last record of
// report kind (0: none).
func (a *healthAgent) lastSequence(kind events.ReportKind) uint64 {
	recs := a.reports(kind)
	if len(recs) == 0 {
		return 0
	}
	return recs[len(recs)-1].Sequence
}

// TestAnExit2CrashLoopIsDegradedThenAFixedRevisionConverges is the issue's
// crash loop on an agent of the simulated engine: a service that exits
// with code 2 at start (a missing environment variable), restart_policy
// unless-stopped. The switch succeeds (Ready, Succeeded); after the third
// crash the Deployment is Degraded in kubectl (condition, column) and in
// fleet history within a minute, naming the device, the exit code, the
// restarts and the service's last output, while its phase stays Succeeded.
// A Degraded forged by a device that does not hold the revision is not
// believed. An agent restart keeps it Degraded with at most one new health
// record; a fixed revision converges and clears it, with nothing more said
// of the old revision.
func TestAnExit2CrashLoopIsDegradedThenAFixedRevisionConverges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	e := newHealthEnv(t, ctx, "crashloop")
	rt, v1, v2 := crashingEngine("crashloop")
	a := e.device("1", false, rt)
	dev := a.id
	e.apply("crashloop", "", "api", v1)
	e.waitReady("crashloop")

	t.Run("the third crash makes it Degraded within a minute", func(t *testing.T) {
		uid, rev := e.jsonpath("crashloop", "{.metadata.uid}"), e.jsonpath("crashloop", "{.status.revision.id}")
		forged := events.NewWorkloadHealth(events.TypeWorkloadDegraded, events.WorkloadHealth{Namespace: e.ns, Deployment: "crashloop",
			UID: uid, Generation: 1, RevisionID: rev, Reason: events.HealthCrashLoop, Window: 300,
			Services: []events.ServiceHealth{{Name: "api", State: "exited", Restarts: 99, ExitCode: 2}}, Since: time.Now().UTC()})
		ev, err := events.New(events.Keys{Device: "intruder-" + dev}, forged, events.WithCorrelation(uid, 1))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.st.Report(ctx, ev); err != nil {
			t.Fatal(err)
		}

		for range 3 {
			a.crash("api", 2, false)
		}
		third := time.Now()
		var degraded string
		testenv.EventuallyErr(t, "Degraded True in kubectl", time.Minute, func() error {
			if degraded = e.condition("crashloop", "Degraded", 1); !strings.HasPrefix(degraded, "True ServicesDegraded ") {
				return fmt.Errorf("Degraded of generation 1 is %q", degraded)
			}
			return nil
		})
		for _, want := range []string{"1 of 1 devices degraded: " + dev + " (api: CrashLoop, exited with code 2, 3 restarts in 5m0s"} {
			if !strings.Contains(degraded, want) {
				t.Errorf("the Degraded message lacks %q: %s", want, degraded)
			}
		}
		if strings.Contains(degraded, "intruder") {
			t.Errorf("the forged report of a device that does not hold the revision was believed: %s", degraded)
		}
		if n := e.jsonpath("crashloop", "{.status.counts.degraded}"); n != "1" {
			t.Errorf("status.counts.degraded %q, want 1", n)
		}
		if header := strings.Fields(strings.SplitN(e.kubectl("", "get", "fdeploy", "crashloop", "-n", e.ns), "\n", 2)[0]); !strings.Contains(strings.Join(header, " "), "DEGRADED") {
			t.Errorf("kubectl get fdeploy has no DEGRADED column: %v", header)
		}
		if phase, ready := e.jsonpath("crashloop", "{.status.phase}"), e.condition("crashloop", "Ready", 1); phase != "Succeeded" || !strings.HasPrefix(ready, "True ") {
			t.Errorf("phase %s, Ready %q: health never rewrites a rollout that succeeded", phase, ready)
		}
		want := dev + ` degraded: api CrashLoop, exit 2, 3 restarts in 5m, last output "fatal: DB_PASSWORD is not set"`
		testenv.EventuallyErr(t, "fleet history names the crash loop", time.Minute-time.Since(third), func() error {
			out, err := e.deploymentHistory("crashloop")
			if err != nil {
				return err
			}
			if !strings.Contains(out, want) {
				return fmt.Errorf("fleet history lacks %q:\n%s", want, out)
			}
			return nil
		})
		if took := time.Since(third); took > time.Minute {
			t.Errorf("Degraded took %s after the third crash, want under a minute", took)
		}
		if n := len(a.reports(events.ReportHealth)); n != 1 {
			t.Errorf("%d health records, want 1 (Degraded, on change only)", n)
		}
	})

	t.Run("an agent restart keeps it Degraded with at most one new health record", func(t *testing.T) {
		before := len(a.reports(events.ReportHealth))
		snapshot := a.lastSequence(events.ReportContainers)
		a.stop()
		a.start()
		// The new agent sends its containers snapshot at start: by then
		// it has read its state file and decided.
		testenv.EventuallyErr(t, "the restarted agent's containers snapshot", 30*time.Second, func() error {
			if seq := a.lastSequence(events.ReportContainers); seq <= snapshot {
				return fmt.Errorf("last containers record %d, before the restart %d", seq, snapshot)
			}
			return nil
		})
		if after := len(a.reports(events.ReportHealth)); after > before+1 {
			t.Errorf("%d health records after the restart, %d before: want at most one more", after, before)
		}
		if degraded := e.condition("crashloop", "Degraded", 1); !strings.HasPrefix(degraded, "True ServicesDegraded ") {
			t.Errorf("Degraded of generation 1 is %q after the agent restarted", degraded)
		}
	})

	t.Run("a fixed revision converges and clears it", func(t *testing.T) {
		before := len(a.reports(events.ReportHealth))
		e.apply("crashloop", "", "api", v2)
		e.waitReady("crashloop")
		testenv.EventuallyErr(t, "Degraded False for generation 2", 30*time.Second, func() error {
			if c := e.condition("crashloop", "Degraded", 2); !strings.HasPrefix(c, "False NoDegradedDevices ") {
				return fmt.Errorf("Degraded of generation 2 is %q", c)
			}
			return nil
		})
		if n := e.jsonpath("crashloop", "{.status.counts.degraded}"); n != "" && n != "0" {
			t.Errorf("status.counts.degraded %q after the fixed revision, want none", n)
		}
		reps := a.reports(events.ReportWorkload)
		last, err := events.Decode[events.WorkloadStatus](reps[len(reps)-1].Event)
		if err != nil || last.Generation != 2 || last.Phase != events.WorkloadConverged {
			t.Errorf("the device's last report is %+v (%v), want generation 2 Converged", last, err)
		}
		if after := len(a.reports(events.ReportHealth)); after != before {
			t.Errorf("%d health records after the fix, %d before: nothing more is said of the old revision", after, before)
		}
	})
}

// TestACrashOnceIsNotDegradedAndAnOOMKillIs: on one device, a service that
// crashes once and runs again is not Degraded; a service of another
// Deployment killed once by the OOM killer is (one kill is enough). The OOM
// kill comes after the single crash, so once its Degraded is in kubectl the
// agent has judged the single crash too.
func TestACrashOnceIsNotDegradedAndAnOOMKillIs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newHealthEnv(t, ctx, "once")
	rt, v1, _ := crashingEngine("once")
	a := e.device("1", false, rt)
	e.apply("once", "", "steady", v1)
	e.apply("oom", "", "hungry", v1)
	e.waitReady("once")
	e.waitReady("oom")

	a.crash("steady", 2, false)
	testenv.EventuallyErr(t, "the agent counted the crash", 30*time.Second, func() error {
		if n := a.deaths(); n != 1 {
			return fmt.Errorf("%d deaths counted", n)
		}
		return nil
	})
	a.crash("hungry", 137, true)
	testenv.EventuallyErr(t, "the OOM kill Degraded in kubectl", time.Minute, func() error {
		if c := e.condition("oom", "Degraded", 1); !strings.HasPrefix(c, "True ServicesDegraded ") || !strings.Contains(c, "hungry: OOMKilled") {
			return fmt.Errorf("Degraded of oom is %q", c)
		}
		return nil
	})
	if c := e.condition("once", "Degraded", 1); !strings.HasPrefix(c, "False NoDegradedDevices ") {
		t.Errorf("Degraded of the Deployment that crashed once is %q, want False", c)
	}
	for _, rec := range a.reports(events.ReportHealth) {
		h, err := events.Decode[events.WorkloadHealth](rec.Event)
		if err != nil || h.Deployment != "oom" || rec.Event.Type != events.TypeWorkloadDegraded || h.Reason != events.HealthOOMKilled {
			t.Errorf("health record %s %+v (%v), want only oom's Degraded OOMKilled", rec.Event.Type, h, err)
		}
	}
	if c, err := rt.Inspect(ctx, "steady"); err != nil || c.State != runtime.StateRunning || c.RestartCount != 1 {
		t.Errorf("steady is %+v (%v), want running after one restart", c, err)
	}
}

// TestACrashWithinMinReadyFailsTheCanaryStage: a Deployment with minReady
// 30s whose canary's service crashes while it settles: the canary device
// reports Failed naming the crash and the stability period, the rollout
// fails at its canary stage (canary-failed, failed), and the other device
// is never handed the revision.
func TestACrashWithinMinReadyFailsTheCanaryStage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := newHealthEnv(t, ctx, "minready")
	rt, v1, _ := crashingEngine("minready")
	canary := e.device("1", true, rt)
	other := e.device("2", false, sim.New(sim.Options{LocalImages: []string{v1}}))
	e.apply("settle", "minReady: 30s", "api", v1)

	// The canary's service crashes over and over from its first start: a
	// crash before the agent started settling the revision only moves the
	// start the period counts from, and the next one falls inside it.
	testenv.EventuallyErr(t, "the canary reports Failed", time.Minute, func() error {
		if err := rt.Crash("api", 2, false); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			return err
		}
		reps := canary.reports(events.ReportWorkload)
		if len(reps) == 0 {
			return errors.New("no report")
		}
		ws, err := events.Decode[events.WorkloadStatus](reps[len(reps)-1].Event)
		if err != nil {
			return err
		}
		if ws.Phase != events.WorkloadFailed {
			return fmt.Errorf("last report %s", ws.Phase)
		}
		if !strings.Contains(ws.Error, "service api exited with code 2") || !strings.Contains(ws.Error, "within the Deployment's minReady of 30s") {
			t.Errorf("the Failed report says %q", ws.Error)
		}
		return nil
	})
	e.waitFor("settle", "become Progressing False", conditionIs("Progressing", "False"))
	if c := e.condition("settle", "Progressing", 1); !strings.HasPrefix(c, "False CanaryFailed ") {
		t.Errorf("Progressing is %q, want False CanaryFailed", c)
	}
	if phase := e.jsonpath("settle", "{.status.phase}"); phase != "Failed" {
		t.Errorf("phase %s, want Failed", phase)
	}
	var types []string
	for rec, err := range e.st.Replay(ctx, "fleet.rollout.deployment."+e.ns+".settle", events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		types = append(types, string(rec.Event.Type))
	}
	if got := strings.Join(types, " "); !strings.Contains(got, "rollout.canary-failed") || !strings.Contains(got, "rollout.failed") ||
		strings.Contains(got, "rollout.released") {
		t.Errorf("transitions %s, want canary-failed and failed, and no release", got)
	}
	if n := len(other.reports(events.ReportWorkload)); n != 0 {
		t.Errorf("the other device reported %d times: it was handed the revision", n)
	}
}

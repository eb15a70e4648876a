package operator_test

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/score"
)

// healthEvent is a device.workload.degraded or .recovered report of device
// for rev of Deployment deployment, as an agent builds it; keys names the
// device the envelope claims.
func (e *env) healthEvent(keys, deployment string, rev events.DeploymentRevisionCreated, typ events.Type, reason string, restarts int) events.Event {
	e.t.Helper()
	ev, err := events.New(events.Keys{Device: keys}, events.NewWorkloadHealth(typ, events.WorkloadHealth{Namespace: e.ns, Deployment: deployment,
		UID: rev.UID, Generation: rev.Generation, RevisionID: rev.RevisionID, Reason: reason, Window: 300,
		Services: []events.ServiceHealth{{Name: "api", State: "exited", Restarts: restarts, ExitCode: 2, Logs: []string{"fatal: MODE is not set"}}},
		Since:    time.Now().UTC()}), events.WithCorrelation(rev.UID, rev.Generation))
	if err != nil {
		e.t.Fatal(err)
	}
	return ev
}

// degraded is the Deployment's Degraded condition (nil: none).
func (e *env) degraded(name string) *metav1.Condition {
	e.t.Helper()
	return meta.FindStatusCondition(e.get(name).Status.Conditions, fleetv1.ConditionDegraded)
}

// succeededRollout runs Deployment api to Succeeded on the canary rpi-1
// and the others, and returns the operator's stop and revision 1.
func (e *env) succeededRollout(others ...string) (stop func(), rev events.DeploymentRevisionCreated) {
	e.t.Helper()
	stop, rev = e.canaryRollout(others...)
	e.report("rpi-1", "api", rev, events.WorkloadConverged, "")
	for _, d := range others {
		e.waitFor("the release to "+d, func() bool { return e.intentOf(d, "api") == 1 })
		e.report(d, "api", rev, events.WorkloadConverged, "")
	}
	e.waitPhase("api", fleetv1.PhaseSucceeded)
	return stop, rev
}

// TestADegradedDeviceMakesTheDeploymentDegradedNeverFailed: after the
// rollout succeeded, a device's degraded report sets the Degraded
// condition (naming the device, the service, its exit and restarts),
// status.degraded, counts.degraded and the gauge; the phase, the counts
// and Ready stay. Its recovered report clears them.
func TestADegradedDeviceMakesTheDeploymentDegradedNeverFailed(t *testing.T) {
	e := newEnv(t)
	e.metrics = operator.NewMetrics()
	_, rev := e.succeededRollout("rpi-2")
	dep := map[string]string{"namespace": e.ns, "deployment": "api"}
	if c := e.degraded("api"); c == nil || c.Status != metav1.ConditionFalse || c.Reason != fleetv1.ReasonNoDegradedDevices {
		t.Errorf("Degraded %+v before any health report, want False NoDegradedDevices", c)
	}

	if err := e.store.Report(e.ctx, e.healthEvent("rpi-2", "api", rev, events.TypeWorkloadDegraded, events.HealthCrashLoop, 3)); err != nil {
		t.Fatal(err)
	}
	var c *metav1.Condition
	e.waitFor("Degraded True", func() bool {
		c = e.degraded("api")
		return c != nil && c.Status == metav1.ConditionTrue
	})
	if want := "1 of 2 devices degraded: rpi-2 (api: CrashLoop, exited with code 2, 3 restarts in 5m0s)"; c.Reason != fleetv1.ReasonServicesDegraded || c.Message != want {
		t.Errorf("Degraded %s %q, want %s %q", c.Reason, c.Message, fleetv1.ReasonServicesDegraded, want)
	}
	d := e.get("api")
	if d.Status.Phase != fleetv1.PhaseSucceeded || d.Status.Counts.Succeeded != 2 || d.Status.Counts.Degraded != 1 || len(d.Status.Degraded) != 1 ||
		d.Status.Degraded[0].Device != "rpi-2" || d.Status.Degraded[0].Reason != events.HealthCrashLoop {
		t.Errorf("status %+v, want Succeeded with 2 succeeded, 1 degraded (rpi-2, CrashLoop)", d.Status)
	}
	if ready := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionReady); ready == nil || ready.Status != metav1.ConditionTrue {
		t.Errorf("Ready %+v, want True: health never rewrites a rollout", ready)
	}
	if v, found := scrape(t, e.metrics, operator.MetricDeploymentDegraded, dep); !found || v != 1 {
		t.Errorf("%s = %v (exported: %v), want 1", operator.MetricDeploymentDegraded, v, found)
	}

	if err := e.store.Report(e.ctx, e.healthEvent("rpi-2", "api", rev, events.TypeWorkloadRecovered, events.HealthStable, 0)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("Degraded False after the recovery", func() bool {
		c = e.degraded("api")
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == fleetv1.ReasonNoDegradedDevices
	})
	if d := e.get("api"); d.Status.Counts.Degraded != 0 || len(d.Status.Degraded) != 0 {
		t.Errorf("status still lists degraded devices: %+v", d.Status)
	}
	if v, found := scrape(t, e.metrics, operator.MetricDeploymentDegraded, dep); !found || v != 0 {
		t.Errorf("%s = %v (exported: %v), want 0", operator.MetricDeploymentDegraded, v, found)
	}
}

// TestADegradedDeploymentStaysDegradedAcrossAnOperatorRestart: the
// checkpoint keeps the degraded devices, and a rebuild from zero finds
// them again.
func TestADegradedDeploymentStaysDegradedAcrossAnOperatorRestart(t *testing.T) {
	e := newEnv(t)
	stop, rev := e.succeededRollout("rpi-2")
	if err := e.store.Report(e.ctx, e.healthEvent("rpi-2", "api", rev, events.TypeWorkloadDegraded, events.HealthOOMKilled, 1)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("Degraded True", func() bool { c := e.degraded("api"); return c != nil && c.Status == metav1.ConditionTrue })
	want := e.get("api").Status.Degraded
	for _, from := range []string{"the checkpoint", "the first event"} {
		t.Run("from "+from, func(t *testing.T) {
			// Stop the operator, drop the status, and let a new one
			// write it again.
			stop()
			if from == "the first event" {
				if err := e.obj.Delete(e.ctx, operator.CheckpointObject); err != nil {
					t.Fatal(err)
				}
			}
			d := e.get("api")
			d.Status.Degraded, d.Status.Counts.Degraded = nil, 0
			meta.RemoveStatusCondition(&d.Status.Conditions, fleetv1.ConditionDegraded)
			if err := e.c.Status().Update(e.ctx, d); err != nil {
				t.Fatal(err)
			}
			stop = e.startOperator()
			e.waitFor("Degraded True again", func() bool { c := e.degraded("api"); return c != nil && c.Status == metav1.ConditionTrue })
			if got := e.get("api").Status.Degraded; len(got) != 1 || got[0].Device != want[0].Device || got[0].Reason != want[0].Reason ||
				!got[0].Since.Equal(&want[0].Since) || !strings.Contains(got[0].Message, "api: OOMKilled") {
				t.Errorf("degraded after the restart %+v, want %+v", got, want)
			}
		})
	}
}

// TestTheAPIServerRefusesAMinReadyOutOfBounds: 0s to 15m, and never longer
// than the Deployment's progress deadline.
func TestTheAPIServerRefusesAMinReadyOutOfBounds(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name     string
		minReady time.Duration
		deadline time.Duration // 0: none
		refused  string        // the message naming the rule; "": accepted
	}{
		{"0s is accepted", 0, 0, ""},
		{"30 seconds are accepted", 30 * time.Second, 0, ""},
		{"15 minutes are accepted", 15 * time.Minute, 0, ""},
		{"15 minutes and a second are refused", 15*time.Minute + time.Second, 0, "rollout.minReady must be"},
		{"a minReady within the progress deadline is accepted", time.Minute, time.Minute, ""},
		{"a minReady longer than the progress deadline is refused", 2 * time.Minute, time.Minute, "must not be longer than rollout.progressDeadline"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := fleetv1.RolloutSpec{MinReady: &metav1.Duration{Duration: tc.minReady}}
			if tc.deadline > 0 {
				spec.ProgressDeadline = &metav1.Duration{Duration: tc.deadline}
			}
			d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "bounds", Namespace: e.ns},
				Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "none"}},
					Rollout: spec, Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
						Name: "api", Image: "registry.example.com/api:v1"}}}}}}
			err := e.c.Create(e.ctx, d, &client.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Errorf("created with minReady %s: %v; want it refused with %q", tc.minReady, err, tc.refused)
			case tc.refused == "" && err != nil:
				t.Errorf("refused with minReady %s: %v", tc.minReady, err)
			}
		})
	}
}

package operator_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/score"
)

// progressing is the Deployment's Progressing condition (nil: none).
func (e *env) progressing(name string) *metav1.Condition {
	e.t.Helper()
	return meta.FindStatusCondition(e.get(name).Status.Conditions, fleetv1.ConditionProgressing)
}

// TestProgressDeadlineExceededWithinOneTick: a target that never converges
// (its image does not pull: it reports Pending "registry unavailable,
// retrying" over and over) makes the rollout exceed the operator's
// progress deadline: Progressing turns False, ProgressDeadlineExceeded,
// naming the device and its last report; Ready says so; the gauge is 1.
// It decides nothing: no transition is appended and the phase stays. Once
// the device converges the rollout succeeds, Progressing is False
// RolloutSucceeded and the gauge is gone.
func TestProgressDeadlineExceededWithinOneTick(t *testing.T) {
	e := newEnv(t)
	e.metrics = operator.NewMetrics()
	e.progressDeadline = 3 * time.Second
	ok, stuck := "ok-"+e.ns, "stuck-"+e.ns
	e.device(ok, map[string]string{"role": "deadline"})
	e.device(stuck, map[string]string{"role": "deadline"})
	e.startOperator()
	e.deployment("api", map[string]string{"role": "deadline"})
	rev := e.revisionOf("api", 1)
	if rev.ProgressDeadlineSeconds != 0 {
		t.Errorf("the revision of a Deployment without a progress deadline froze one: %d", rev.ProgressDeadlineSeconds)
	}
	const pending = "registry unavailable, retrying: image localhost/fleet-examples/analysis-apii:v1 could not be pulled"
	e.report(ok, "api", rev, events.WorkloadConverged, "")
	e.report(stuck, "api", rev, events.WorkloadPending, pending)
	dep := map[string]string{"namespace": e.ns, "deployment": "api"}

	var c *metav1.Condition
	e.waitFor("Progressing False, ProgressDeadlineExceeded", func() bool {
		// The device retries: its chatter never holds the deadline off.
		e.report(stuck, "api", rev, events.WorkloadApplying, "")
		e.report(stuck, "api", rev, events.WorkloadPending, pending)
		c = e.progressing("api")
		return c != nil && c.Status == metav1.ConditionFalse
	})
	if c.Reason != fleetv1.ReasonProgressDeadlineExceeded || c.ObservedGeneration != 1 {
		t.Errorf("Progressing %+v, want False ProgressDeadlineExceeded of generation 1", c)
	}
	// The message names the device's last report: a status written
	// between the chatter's Applying and Pending says Applying, so it is
	// read once the device has said Pending last.
	wants := []string{"progress deadline (3s)", "1 waiting: " + stuck + " Pending since ", ": " + pending}
	says := func(c *metav1.Condition) bool {
		return c != nil && !slices.ContainsFunc(wants, func(w string) bool { return !strings.Contains(c.Message, w) })
	}
	if err := testenv.Poll(e.ctx, 30*time.Second, func() bool { c = e.progressing("api"); return says(c) }); err != nil {
		t.Errorf("the message lacks one of %q (%v): %+v", wants, err, c)
	}
	d := e.get("api")
	if ready := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionReady); ready == nil || ready.Status != metav1.ConditionFalse ||
		!strings.HasSuffix(ready.Message, "; progress deadline exceeded") {
		t.Errorf("Ready %+v, want False saying the progress deadline was exceeded", ready)
	}
	if d.Status.Phase != fleetv1.PhaseProgressing {
		t.Errorf("phase %s, want Progressing: the deadline decides nothing", d.Status.Phase)
	}
	if v, found := scrape(t, e.metrics, operator.MetricRolloutDeadline, dep); !found || v != 1 {
		t.Errorf("%s = %v (exported: %v), want 1", operator.MetricRolloutDeadline, v, found)
	}
	if tr := e.transitions("api"); !slices.Equal(tr, []events.Type{events.TypeRolloutStarted, events.TypeRolloutReleased}) {
		t.Errorf("transitions %v, want only started and released: the deadline appends nothing", tr)
	}

	e.report(stuck, "api", rev, events.WorkloadConverged, "")
	e.waitFor("Progressing False, RolloutSucceeded", func() bool {
		c = e.progressing("api")
		return c != nil && c.Reason == fleetv1.ReasonRolloutSucceeded
	})
	if c.Status != metav1.ConditionFalse {
		t.Errorf("Progressing %+v after the rollout succeeded, want False", c)
	}
	e.waitFor("the gauge deleted", func() bool {
		_, found := scrape(t, e.metrics, operator.MetricRolloutDeadline, dep)
		return !found
	})
}

// TestADeploymentsOwnProgressDeadlineIsFrozenAndUsed: spec.rollout.
// progressDeadline is frozen in the revision and replaces the operator's in
// the Progressing condition.
func TestADeploymentsOwnProgressDeadlineIsFrozenAndUsed(t *testing.T) {
	e := newEnv(t)
	e.device("d-"+e.ns, map[string]string{"role": "own-deadline"})
	e.startOperator()
	e.deployment("api", map[string]string{"role": "own-deadline"})
	e.revisionOf("api", 1)
	e.update("api", func(d *fleetv1.Deployment) {
		d.Spec.Rollout.ProgressDeadline = &metav1.Duration{Duration: 90 * time.Second}
	})
	rev := e.revisionOf("api", 2)
	if rev.ProgressDeadlineSeconds != 90 {
		t.Errorf("revision 2 froze progressDeadlineSeconds %d, want 90", rev.ProgressDeadlineSeconds)
	}
	e.waitFor("Progressing True of generation 2 with the Deployment's deadline", func() bool {
		c := e.progressing("api")
		return c != nil && c.ObservedGeneration == 2 && c.Status == metav1.ConditionTrue && c.Reason == fleetv1.ReasonRolloutProgressing &&
			strings.HasSuffix(c.Message, "progress deadline 1m30s")
	})
}

// TestTheAPIServerRefusesAProgressDeadlineOutOfBounds: 30s to 24h.
func TestTheAPIServerRefusesAProgressDeadlineOutOfBounds(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name     string
		deadline time.Duration
		refused  bool
	}{
		{"29 seconds are refused", 29 * time.Second, true},
		{"30 seconds are accepted", 30 * time.Second, false},
		{"24 hours are accepted", 24 * time.Hour, false},
		{"24 hours and a second are refused", 24*time.Hour + time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "bounds", Namespace: e.ns},
				Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "none"}},
					Rollout: fleetv1.RolloutSpec{ProgressDeadline: &metav1.Duration{Duration: tc.deadline}},
					Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
						Name: "api", Image: "registry.example.com/api:v1"}}}}}}
			err := e.c.Create(e.ctx, d, &client.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case tc.refused && (err == nil || !strings.Contains(err.Error(), "rollout.progressDeadline must be")):
				t.Errorf("created with %s: %v; want it refused, naming the field", tc.deadline, err)
			case !tc.refused && err != nil:
				t.Errorf("refused with %s: %v", tc.deadline, err)
			}
		})
	}
}

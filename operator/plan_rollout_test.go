package operator_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// control appends an approval, pause or resume as the operator's request
// path does.
func (e *env) control(name string, rev events.DeploymentRevisionCreated, typ events.Type, d events.RolloutTransition) {
	e.t.Helper()
	d.UID, d.Generation, d.RevisionID = rev.UID, rev.Generation, rev.RevisionID
	ev, err := events.New(events.Keys{Namespace: e.ns, Name: name}, events.NewRolloutTransition(typ, d), events.WithCorrelation(rev.UID, rev.Generation))
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Append(e.ctx, ev); err != nil {
		e.t.Fatal(err)
	}
}

// readyMessage is the Ready condition's message of the Deployment's
// current generation ("" until the runner described it).
func (e *env) readyMessage(name string) string {
	d := e.get(name)
	c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionReady)
	if c == nil || c.ObservedGeneration != d.Generation {
		return ""
	}
	return c.Message
}

// TestAPlannedRolloutRunsBatchByBatchOnTheRealAPIServer applies a
// Deployment with a canary, two batches, manual approval and a disruption
// budget of one device per site to the real API server, and plays the
// devices and the approver: each batch waits for its approval, a pause holds
// an approved batch, the budget hands site a's devices one at a time, and
// the rollout succeeds with the event sequence the plan calls for.
func TestAPlannedRolloutRunsBatchByBatchOnTheRealAPIServer(t *testing.T) {
	e := newEnv(t)
	e.device("pc1", map[string]string{"role": "edge", "site": "a", "canary": "true"})
	e.device("pd1", map[string]string{"role": "edge", "site": "a"})
	e.device("pd2", map[string]string{"role": "edge", "site": "b"})
	e.device("pd3", map[string]string{"role": "edge", "site": "a"})
	e.device("pd4", map[string]string{"role": "edge", "site": "b"})
	e.device("pd5", map[string]string{"role": "edge", "site": "a"})
	e.startOperator()
	d := &fleetv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "planned", Namespace: e.ns},
		Spec: fleetv1.DeploymentSpec{
			TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "edge"}},
			Rollout: fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](2)}},
				Approval: fleetv1.RolloutApprovalManual, OnFailure: fleetv1.RolloutOnFailurePause,
				DisruptionBudget: &fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromInt32(1)}},
			Score: fleetv1.Score{Type: fleetv1.ScorePodmanV0, Data: fleetv1.PodmanV0{Services: []fleetv1.PodmanService{{
				Name: "api", Image: "registry.example.com/api:v1"}}}},
		},
	}
	if err := e.c.Create(e.ctx, d); err != nil {
		t.Fatal(err)
	}
	rev := e.revisionOf("planned", 1)
	if diff := cmp.Diff([]int{0, 1, 1, 2, 2, 2}, rev.TargetBatches); diff != "" {
		t.Fatalf("target batches of pc1, pd1..pd5 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 0, 1, 0, 1, 0}, rev.TargetGroups); diff != "" {
		t.Fatalf("target groups (-want +got):\n%s", diff)
	}
	handed := func(devices ...string) func() bool {
		return func() bool {
			for _, dev := range devices {
				if e.intentOf(dev, "planned") != 1 {
					return false
				}
			}
			return true
		}
	}

	e.waitFor("the canary handed the revision", handed("pc1"))
	e.report("pc1", "planned", rev, events.WorkloadConverged, "")
	e.waitFor("batch 1 awaiting approval", func() bool { return strings.Contains(e.readyMessage("planned"), "batch 1 awaits approval") })
	if e.intentOf("pd1", "planned") != 0 {
		t.Fatal("pd1 was handed the revision before its batch was approved")
	}
	e.control("planned", rev, events.TypeRolloutApproved, events.RolloutTransition{Batch: 1, By: "ana", Request: "req-1"})
	e.waitFor("batch 1 handed the revision", handed("pd1", "pd2"))
	e.report("pd1", "planned", rev, events.WorkloadConverged, "")
	e.report("pd2", "planned", rev, events.WorkloadConverged, "")
	e.waitFor("batch 2 awaiting approval", func() bool { return strings.Contains(e.readyMessage("planned"), "batch 2 awaits approval") })

	e.control("planned", rev, events.TypeRolloutPaused, events.RolloutTransition{By: "bo", Request: "req-2"})
	e.waitFor("the pause in the status", func() bool { return strings.Contains(e.readyMessage("planned"), "paused by bo") })
	e.control("planned", rev, events.TypeRolloutApproved, events.RolloutTransition{Batch: 2, By: "ana", Request: "req-3"})
	e.control("planned", rev, events.TypeRolloutResumed, events.RolloutTransition{By: "bo", Request: "req-4"})
	// The budget: one device of site a and one of site b at a time.
	e.waitFor("the first wave of batch 2", handed("pd3", "pd4"))
	if e.intentOf("pd5", "planned") != 0 {
		t.Fatal("pd5 was handed the revision while pd3, of the same site, had not converged (budget 1 per site)")
	}
	e.report("pd3", "planned", rev, events.WorkloadConverged, "")
	e.waitFor("the second wave of batch 2", handed("pd5"))
	e.report("pd4", "planned", rev, events.WorkloadConverged, "")
	e.report("pd5", "planned", rev, events.WorkloadConverged, "")
	e.waitPhase("planned", fleetv1.PhaseSucceeded)

	want := []events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanariesConverged,
		events.TypeRolloutAwaitingApproval, events.TypeRolloutApproved, events.TypeRolloutBatchStarted, events.TypeRolloutBatchSucceeded,
		events.TypeRolloutAwaitingApproval, events.TypeRolloutPaused, events.TypeRolloutApproved, events.TypeRolloutResumed,
		events.TypeRolloutBatchStarted, events.TypeRolloutBatchStarted, events.TypeRolloutBatchSucceeded, events.TypeRolloutSucceeded}
	if diff := cmp.Diff(want, e.transitions("planned")); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	if slices.Contains(e.transitions("planned"), events.TypeRolloutReleased) {
		t.Error("a planned rollout appended rollout.released")
	}
}

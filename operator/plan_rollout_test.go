package operator_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

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
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
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
	if p := e.get("planned").Status.Plan; p == nil || p.AwaitingApproval != 1 || p.Batches != 2 || p.Batch != 0 {
		t.Errorf("status.plan %+v, want batch 1 of 2 awaiting approval", p)
	}
	if e.intentOf("pd1", "planned") != 0 {
		t.Fatal("pd1 was handed the revision before its batch was approved")
	}
	// The requests go the way an admin's do: the rollout-action
	// annotation, recorded by the operator as a transition.
	e.annotate("planned", request("approve", 1, 1, "ana", "req-1"))
	e.waitFor("batch 1 handed the revision", handed("pd1", "pd2"))
	e.report("pd1", "planned", rev, events.WorkloadConverged, "")
	e.report("pd2", "planned", rev, events.WorkloadConverged, "")
	e.waitFor("batch 2 awaiting approval", func() bool { return strings.Contains(e.readyMessage("planned"), "batch 2 awaits approval") })

	e.annotate("planned", request("pause", 1, 0, "bo", "req-2"))
	e.waitFor("the pause in the status", func() bool { return strings.Contains(e.readyMessage("planned"), "paused by bo") })
	if p := e.get("planned").Status.Plan; p == nil || !p.Paused || p.PausedBy != "bo" || p.Batch != 1 {
		t.Errorf("status.plan %+v, want batch 1, paused by bo", p)
	}
	e.annotate("planned", request("approve", 1, 2, "ana", "req-3"))
	e.waitFor("the approval recorded", func() bool { return len(e.requests("planned")) == 3 })
	e.annotate("planned", request("resume", 1, 0, "bo", "req-4"))
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

// TestAFailedBatchIsRolledBackToTheLastGenerationThatSucceeded rolls out
// generation 1 of a Deployment to three devices, then applies generation 2
// with a first batch of one device and onFailure Rollback: the device of
// the first batch fails, and is handed generation 1 again; the other two
// never leave it; the status says why.
func TestAFailedBatchIsRolledBackToTheLastGenerationThatSucceeded(t *testing.T) {
	e := newEnv(t)
	for _, dev := range []string{"rb1", "rb2", "rb3"} {
		e.device(dev, map[string]string{"role": "rb"})
	}
	e.startOperator()
	e.deployment("web", map[string]string{"role": "rb"})
	rev1 := e.revisionOf("web", 1)
	for _, dev := range []string{"rb1", "rb2", "rb3"} {
		e.report(dev, "web", rev1, events.WorkloadConverged, "")
	}
	e.waitPhase("web", fleetv1.PhaseSucceeded)

	e.update("web", func(d *fleetv1.Deployment) {
		d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2"
		d.Spec.Rollout.Batches = []fleetv1.RolloutBatch{{Count: ptr[int32](1)}}
		d.Spec.Rollout.OnFailure = fleetv1.RolloutOnFailureRollback
	})
	rev2 := e.revisionOf("web", 2)
	e.waitFor("rb1 handed generation 2", func() bool { return e.intentOf("rb1", "web") == 2 })
	e.report("rb1", "web", rev2, events.WorkloadFailed, "service api exited with code 3")
	e.waitFor("the rollback in the status", func() bool {
		d := e.get("web")
		c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionReady)
		return d.Status.ObservedGeneration == 2 && c != nil && c.Reason == fleetv1.ReasonRolledBack
	})
	d := e.get("web")
	if d.Status.Phase != fleetv1.PhaseFailed || d.Status.Plan == nil || d.Status.Plan.RolledBackTo != 1 {
		t.Errorf("phase %s, plan %+v: want Failed, rolled back to 1", d.Status.Phase, d.Status.Plan)
	}
	if c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionReady); !strings.Contains(c.Message, "rolled back to generation 1") {
		t.Errorf("Ready message %q does not say it rolled back", c.Message)
	}
	e.waitFor("rb1 handed generation 1 again", func() bool { return e.intentOf("rb1", "web") == 1 })
	for _, dev := range []string{"rb2", "rb3"} {
		if g := e.intentOf(dev, "web"); g != 1 {
			t.Errorf("%s holds generation %d, want 1 (never handed 2)", dev, g)
		}
	}
	var gen2 []events.Type
	subj, _ := events.DeploymentRolloutSubject(e.ns, "web")
	for r, err := range e.store.Replay(e.ctx, subj, events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		if tr, err := events.Decode[events.RolloutTransition](r.Event); err == nil && tr.Generation == 2 {
			gen2 = append(gen2, r.Event.Type)
			if r.Event.Type == events.TypeRolloutRolledBack && (tr.RollbackTo != 1 || !slices.Equal(tr.Released, []string{"rb1"})) {
				t.Errorf("rollout.rolled-back %+v, want generation 1 to [rb1]", tr)
			}
		}
	}
	want := []events.Type{events.TypeRolloutStarted, events.TypeRolloutBatchStarted, events.TypeRolloutBatchFailed,
		events.TypeRolloutRolledBack, events.TypeRolloutFailed}
	if diff := cmp.Diff(want, gen2); diff != "" {
		t.Errorf("generation 2's transitions (-want +got):\n%s", diff)
	}
}

// TestHostileReportsNeitherAdvanceNorFailABatch: during a rollout in
// batches, the device of the second batch publishes on its own subject
// every poison variant of a report in the name of the first batch's device,
// then "it converged" and "it failed" in that device's name. None of them
// counts: the first batch neither succeeds nor fails, the second device is
// not handed the revision, and the first device's own report still counts.
func TestHostileReportsNeitherAdvanceNorFailABatch(t *testing.T) {
	e := newEnv(t)
	e.logs = slog.DiscardHandler // a warning per poison record
	e.skips = events.NewSkipCounter()
	e.device("hb-1", map[string]string{"role": "hb"})
	e.device("hb-2", map[string]string{"role": "hb"})
	e.startOperator()
	d := &fleetv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: e.ns},
		Spec: fleetv1.DeploymentSpec{
			TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "hb"}},
			Rollout:        fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](1)}}},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
				Name: "api", Image: "registry.example.com/api:v1"}}}},
		},
	}
	if err := e.c.Create(e.ctx, d); err != nil {
		t.Fatal(err)
	}
	rev := e.revisionOf("api", 1)
	e.waitFor("hb-1 handed the revision", func() bool { return e.intentOf("hb-1", "api") == 1 })

	subject := "fleet.report.hb-2.workload"
	cases := poisontest.For(t, e.workloadEvent("hb-1", rev, events.WorkloadConverged))
	for _, c := range cases {
		e.publishRaw(subject, c.Payload)
	}
	e.publishRaw(subject, marshal(t, e.workloadEvent("hb-1", rev, events.WorkloadConverged)))
	e.publishRaw(subject, marshal(t, e.workloadEvent("hb-1", rev, events.WorkloadFailed)))
	// Every one of them is skipped, once: when all are counted, the runner
	// has folded (and decided after) each.
	e.waitFor("every hostile report skipped", func() bool {
		return e.skips.Skipped(events.StreamReports, "") == uint64(len(cases)+2)
	})
	if n := e.skips.Skipped(events.StreamReports, events.ReasonSubjectMismatch); n < 2 {
		t.Errorf("%d reports refused for naming another device than their subject, want at least the 2 forged ones", n)
	}
	want := []events.Type{events.TypeRolloutStarted, events.TypeRolloutBatchStarted}
	if diff := cmp.Diff(want, e.transitions("api")); diff != "" {
		t.Errorf("transitions after the hostile reports (-want +got):\n%s", diff)
	}
	if n := e.intentOf("hb-2", "api"); n != 0 {
		t.Errorf("hb-2 was handed generation %d: a forged report advanced the first batch", n)
	}

	e.report("hb-1", "api", rev, events.WorkloadConverged, "")
	e.waitFor("the second batch started", func() bool { return e.intentOf("hb-2", "api") == 1 })
}

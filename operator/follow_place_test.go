package operator_test

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

// TestAFollowerJoinsTheBatchItsPlanWouldGiveIt (ADR 0026), real
// kube-apiserver and JetStream: a Follow Deployment with a plan of a
// selector batch (site=paris), a count batch and the leftovers, manual
// approval and one device per site at a time. A follower of site paris
// joins the selector batch, which ended already, and is handed the
// revision at once while batch 2 awaits approval; a follower of a site
// the plan does not know (nantes) joins the last batch in a group of its
// own, handed the revision with the batch beside one without the label.
// Then generation 2 fails in its first batch: a follower that joined its
// last batch and was never handed it is handed generation 1, the last
// that succeeded.
func TestAFollowerJoinsTheBatchItsPlanWouldGiveIt(t *testing.T) {
	e := newEnv(t)
	e.device("pd1", map[string]string{"role": "edge", "site": "paris"})
	e.device("pd2", map[string]string{"role": "edge", "site": "lyon"})
	e.device("pd3", map[string]string{"role": "edge", "site": "lyon"})
	e.startOperator()
	e.plannedFollow("sel", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{
		{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "paris"}}}, {Count: ptr[int32](1)}},
		Approval:         fleetv1.RolloutApprovalManual,
		DisruptionBudget: &fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromInt32(1)}}, "registry.example.com/api:v1")
	rev1 := e.revisionOf("sel", 1)
	if rev1.Plan == nil || len(rev1.Plan.Batches) != 3 || rev1.Plan.Batches[0].Selector["site"] != "paris" {
		t.Fatalf("plan %+v: want 3 batches, the first with its selector site=paris", rev1.Plan)
	}
	e.annotate("sel", request("approve", 1, 1, "ana", "req-1"))
	e.waitFor("pd1 handed generation 1", func() bool { return e.intentOf("pd1", "sel") == 1 })
	e.report("pd1", "sel", rev1, events.WorkloadConverged, "")
	e.waitFor("batch 2 awaiting approval", func() bool { return strings.Contains(e.readyMessage("sel"), "batch 2 awaits approval") })

	e.device("pf-paris", map[string]string{"role": "edge", "site": "paris"})
	e.waitFor("pf-paris handed generation 1 in its batch, over already", func() bool { return e.intentOf("pf-paris", "sel") == 1 })
	if tr := e.followTransition("sel", "pf-paris"); tr.Batch != 1 || tr.BudgetGroup != "paris" {
		t.Errorf("pf-paris joined batch %d, group %q: want batch 1 (site=paris), group paris", tr.Batch, tr.BudgetGroup)
	}
	e.report("pf-paris", "sel", rev1, events.WorkloadConverged, "")
	e.device("pf-nantes", map[string]string{"role": "edge", "site": "nantes"})
	e.device("pf-none", map[string]string{"role": "edge"})
	e.waitFor("pf-nantes and pf-none joined", func() bool {
		return e.followTransition("sel", "pf-nantes").Device != "" && e.followTransition("sel", "pf-none").Device != ""
	})
	if tr := e.followTransition("sel", "pf-nantes"); tr.Batch != 3 || tr.BudgetGroup != "nantes" {
		t.Errorf("pf-nantes joined batch %d, group %q: want the last batch (3), group nantes", tr.Batch, tr.BudgetGroup)
	}
	e.annotate("sel", request("approve", 1, 2, "ana", "req-2"))
	e.waitFor("pd2 handed generation 1", func() bool { return e.intentOf("pd2", "sel") == 1 })
	e.report("pd2", "sel", rev1, events.WorkloadConverged, "")
	e.waitFor("batch 3 awaiting approval", func() bool { return strings.Contains(e.readyMessage("sel"), "batch 3 awaits approval") })
	e.annotate("sel", request("approve", 1, 3, "ana", "req-3"))
	// One device per site, but nantes is a site of its own: pd3 (lyon),
	// pf-nantes and pf-none (no site) all at once.
	for _, dev := range []string{"pd3", "pf-nantes", "pf-none"} {
		e.waitFor(dev+" handed generation 1", func() bool { return e.intentOf(dev, "sel") == 1 })
	}
	for _, dev := range []string{"pd3", "pf-nantes", "pf-none"} {
		e.report(dev, "sel", rev1, events.WorkloadConverged, "")
	}
	e.waitPhase("sel", fleetv1.PhaseSucceeded)

	e.update("sel", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
	rev2 := e.revisionOf("sel", 2)
	e.annotate("sel", request("approve", 2, 1, "ana", "req-4"))
	e.waitFor("pd1 handed generation 2", func() bool { return e.intentOf("pd1", "sel") == 2 })
	e.device("pf-late", map[string]string{"role": "edge", "site": "lyon"})
	e.waitFor("pf-late joined generation 2", func() bool {
		return e.followTransition("sel", "pf-late").Generation == 2
	})
	if tr := e.followTransition("sel", "pf-late"); tr.Batch != 3 || e.intentOf("pf-late", "sel") != 0 {
		t.Fatalf("pf-late in batch %d, holding generation %d: want the last batch, nothing yet", tr.Batch, e.intentOf("pf-late", "sel"))
	}
	e.report("pd1", "sel", rev2, events.WorkloadFailed, "image pull failed")
	e.waitPhase("sel", fleetv1.PhaseFailed)
	e.waitFor("pf-late handed generation 1, the last that succeeded", func() bool { return e.intentOf("pf-late", "sel") == 1 })
	if tr := e.followTransition("sel", "pf-late"); tr.HandedGeneration != 1 || tr.HandedRevisionID != rev1.RevisionID ||
		tr.Reason != projections.ReasonFailedBeforeHanded {
		t.Errorf("the follow-up rollout.target-added %+v: want generation 1 (%s) handed, reason %q", tr, rev1.RevisionID, projections.ReasonFailedBeforeHanded)
	}
	e.waitFor("pf-late listed with generation 1", func() bool {
		return slices.ContainsFunc(e.get("sel").Status.Followers, func(f fleetv1.Follower) bool {
			return f.Device == "pf-late" && f.Revision != nil && f.Revision.Generation == 1
		})
	})
}

// TestAFollowerOfASelectorBatchEmptyAtTheFreezeJoinsItsPlace (ADR 0026),
// real kube-apiserver and JetStream: a Follow Deployment's first batch
// selects site=moon, where no device was when the revision was frozen, so
// the plan has no such batch. A device of site moon that comes later
// joins the batch that took that place (the site=paris batch, batch 1),
// not the last batch: it waits for batch 1's approval, no longer, and is
// handed the revision with it.
func TestAFollowerOfASelectorBatchEmptyAtTheFreezeJoinsItsPlace(t *testing.T) {
	e := newEnv(t)
	e.device("pd1", map[string]string{"role": "edge", "site": "paris"})
	e.device("pd2", map[string]string{"role": "edge", "site": "lyon"})
	e.device("pd3", map[string]string{"role": "edge", "site": "lyon"})
	e.startOperator()
	e.plannedFollow("moon", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{
		{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "moon"}}},
		{Selector: &fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "paris"}}}, {Count: ptr[int32](1)}},
		Approval: fleetv1.RolloutApprovalManual}, "registry.example.com/api:v1")
	rev1 := e.revisionOf("moon", 1)
	if rev1.Plan == nil || len(rev1.Plan.Batches) != 3 || rev1.Plan.Batches[0].Selector["site"] != "paris" {
		t.Fatalf("plan %+v: want 3 batches (paris, the count, the leftovers), the empty site=moon batch dropped", rev1.Plan)
	}
	e.device("pf-moon", map[string]string{"role": "edge", "site": "moon"})
	e.waitFor("pf-moon joined", func() bool { return e.followTransition("moon", "pf-moon").Device != "" })
	if tr := e.followTransition("moon", "pf-moon"); tr.Batch != 1 {
		t.Fatalf("pf-moon joined batch %d: want 1, the batch that took the place of its empty site=moon batch", tr.Batch)
	}
	if e.intentOf("pf-moon", "moon") != 0 {
		t.Fatal("pf-moon handed the revision before its batch was approved")
	}
	e.annotate("moon", request("approve", 1, 1, "ana", "req-1"))
	for _, dev := range []string{"pd1", "pf-moon"} {
		e.waitFor(dev+" handed generation 1 with batch 1", func() bool { return e.intentOf(dev, "moon") == 1 })
	}
	if e.intentOf("pd2", "moon") != 0 || e.intentOf("pd3", "moon") != 0 {
		t.Error("a device of a later batch handed the revision with batch 1")
	}
}

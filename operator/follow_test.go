package operator_test

import (
	"context"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/score"
)

// followDeployment creates Deployment name with spec.rollout.targets
// Follow (ADR 0026), written as a user's manifest would.
func (e *env) followDeployment(name string, selector map[string]string, groups ...string) {
	e.t.Helper()
	d := &fleetv1.Deployment{
		TypeMeta: fleetv1TypeMeta("Deployment"),
		Spec: fleetv1.DeploymentSpec{
			AllowedGroups:  groups,
			TargetSelector: fleetv1.TargetSelector{MatchLabels: selector},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
				Name: "api", Image: "registry.example.com/api:v1", Ports: []string{"8080:8080"}}}}},
		},
	}
	d.Name, d.Namespace = name, e.ns
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	if err != nil {
		e.t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	if err := unstructured.SetNestedField(u.Object, "Follow", "spec", "rollout", "targets"); err != nil {
		e.t.Fatal(err)
	}
	unstructured.RemoveNestedField(u.Object, "status")
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	if err := e.c.Create(e.ctx, u); err != nil {
		e.t.Fatal(err)
	}
}

func fleetv1TypeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: fleetv1.GroupVersion.String(), Kind: kind}
}

// cmpIgnoreFollowerTime leaves out when a follower joined (the stream's
// time).
var cmpIgnoreFollowerTime = cmpopts.IgnoreFields(fleetv1.Follower{}, "Since")

// relabel changes a Device's labels, retrying on conflicts.
func (e *env) relabel(device string, change func(map[string]string)) {
	e.t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var d fleetv1.Device
		if err := e.c.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: device}, &d); err != nil {
			return err
		}
		if d.Labels == nil {
			d.Labels = map[string]string{}
		}
		change(d.Labels)
		return e.c.Update(e.ctx, &d)
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// followTransitions lists the target-added and target-removed transitions
// of a Deployment, in order, as "added dev (reason)" / "removed dev (reason)".
func (e *env) followTransitions(name string) []string {
	e.t.Helper()
	subj, _ := events.DeploymentRolloutSubject(e.ns, name)
	var out []string
	for r, err := range e.store.Replay(e.ctx, subj, events.FromStart()) {
		if err != nil {
			e.t.Fatal(err)
		}
		d, err := events.Decode[events.RolloutTransition](r.Event)
		if err != nil {
			continue
		}
		switch r.Event.Type {
		case events.TypeRolloutTargetAdded:
			out = append(out, "added "+d.Device+" ("+d.Reason+")")
		case events.TypeRolloutTargetRemoved:
			out = append(out, "removed "+d.Device+" ("+d.Error+")")
		}
	}
	return out
}

// TestAFollowDeploymentIsTheFleetsStandingState: with spec.rollout.targets
// Follow, a device that comes to match after the revision was frozen
// receives it, with no change to the Deployment, and one that stops
// matching loses it; each change is a transition naming the device and why.
func TestAFollowDeploymentIsTheFleetsStandingState(t *testing.T) {
	tests := []struct {
		name string
		// leave makes the follower stop matching.
		leave      func(e *env, device string)
		wantReason string
	}{
		{"a relabelled follower loses the revision after the debounce", func(e *env, device string) {
			e.relabel(device, func(l map[string]string) { l["role"] = "other" })
		}, "labels no longer match the target selector: role=other (was role=analyzer)"},
		{"a quarantined follower loses the revision at once", func(e *env, device string) {
			e.relabel(device, func(l map[string]string) { l[fleetv1.LabelBlacklist] = "true" })
		}, "Device quarantined"},
		{"a deleted follower leaves at once", func(e *env, device string) {
			var d fleetv1.Device
			d.Name, d.Namespace = device, e.ns
			if err := e.c.Delete(e.ctx, &d); err != nil {
				e.t.Fatal(err)
			}
		}, "Device deleted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.followDebounce = time.Second
			e.device("rpi-1", map[string]string{"role": "analyzer"})
			e.startOperator()
			e.followDeployment("api", map[string]string{"role": "analyzer"})
			rev := e.revisionOf("api", 1)
			e.waitFor("the release to rpi-1", func() bool { return e.intentOf("rpi-1", "api") == 1 })
			e.report("rpi-1", "api", rev, events.WorkloadConverged, "")
			e.waitPhase("api", fleetv1.PhaseSucceeded)

			late := "late-" + e.ns
			e.device(late, map[string]string{"role": "analyzer", "site": "lyon"})
			e.waitFor("the revision handed to the device enrolled later", func() bool { return e.intentOf(late, "api") == 1 })
			if got := e.revisionOf("api", 1); got.RevisionID != rev.RevisionID {
				t.Fatalf("revision %s, want %s: the Deployment changed", got.RevisionID, rev.RevisionID)
			}
			var d *fleetv1.Deployment
			e.waitFor("the follower in the status", func() bool {
				d = e.get("api")
				return d.Status.Counts.Total == 2 && len(d.Status.Followers) == 1
			})
			if diff := cmp.Diff([]fleetv1.Follower{{Device: late, Reason: "Device created", Change: "role=analyzer"}}, d.Status.Followers,
				cmpIgnoreFollowerTime); diff != "" {
				t.Errorf("status.followers (-want +got):\n%s", diff)
			}
			e.report(late, "api", rev, events.WorkloadConverged, "")
			e.waitFor("the follower converged", func() bool {
				d = e.get("api")
				return d.Status.Counts.Succeeded == 2 && d.Status.Phase == fleetv1.PhaseSucceeded
			})

			tc.leave(e, late)
			e.waitFor("the revision taken from the device that left", func() bool { return e.intentOf(late, "api") == 0 })
			e.waitFor("the departure in the status", func() bool {
				d = e.get("api")
				return d.Status.Counts.Total == 1 && len(d.Status.Removed) == 1
			})
			if diff := cmp.Diff([]fleetv1.RemovedTarget{{Device: late, Reason: tc.wantReason}}, d.Status.Removed); diff != "" {
				t.Errorf("status.removed (-want +got):\n%s", diff)
			}
			want := []string{"added " + late + " (Device created)", "removed " + late + " (" + tc.wantReason + ")"}
			if diff := cmp.Diff(want, e.followTransitions("api")); diff != "" {
				t.Errorf("follow transitions (-want +got):\n%s", diff)
			}
			if e.intentOf("rpi-1", "api") != 1 {
				t.Error("the frozen target lost the revision")
			}
		})
	}
}

// TestAFlappingDeviceCostsOneJoin: a device whose labels flip between
// matching and not matching, ending on matching, joins once and never
// leaves within the debounce: its containers are not churned.
func TestAFlappingDeviceCostsOneJoin(t *testing.T) {
	e := newEnv(t)
	e.followDebounce = time.Hour
	e.device("rpi-1", map[string]string{"role": "analyzer"})
	e.startOperator()
	e.followDeployment("api", map[string]string{"role": "analyzer"})
	e.revisionOf("api", 1)
	flap := "flap-" + e.ns
	e.device(flap, map[string]string{"role": "analyzer"})
	e.waitFor("the flapping device joined", func() bool { return e.intentOf(flap, "api") == 1 })
	for i := range 20 {
		e.relabel(flap, func(l map[string]string) {
			l["role"] = []string{"other", "analyzer"}[i%2]
		})
	}
	e.waitFor("the flapping device still holds the revision", func() bool { return e.intentOf(flap, "api") == 1 })
	got := e.followTransitions("api")
	if diff := cmp.Diff([]string{"added " + flap + " (Device created)"}, got); diff != "" {
		t.Errorf("follow transitions (-want +got):\n%s", diff)
	}
}

// TestAFrozenDeploymentGivesALaterDeviceNothing: without
// spec.rollout.targets, a device enrolled after the revision is not a
// target (the product description's rollout), and no follow transition is
// written.
func TestAFrozenDeploymentGivesALaterDeviceNothing(t *testing.T) {
	e := newEnv(t)
	e.device("rpi-1", map[string]string{"role": "analyzer"})
	e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})
	rev := e.revisionOf("api", 1)
	e.waitFor("the release to rpi-1", func() bool { return e.intentOf("rpi-1", "api") == 1 })
	late := "late-" + e.ns
	e.device(late, map[string]string{"role": "analyzer"})
	e.report("rpi-1", "api", rev, events.WorkloadConverged, "")
	d := e.waitPhase("api", fleetv1.PhaseSucceeded)
	if d.Status.Counts.Total != 1 || len(d.Status.Followers) != 0 {
		t.Errorf("counts %+v followers %v, want 1 target, no follower", d.Status.Counts, d.Status.Followers)
	}
	if tr := e.transitions("api"); slices.Contains(tr, events.TypeRolloutTargetAdded) {
		t.Errorf("transitions %v of a Frozen Deployment have a target-added", tr)
	}
	if e.intentOf(late, "api") != 0 {
		t.Error("a device enrolled after a Frozen revision received it")
	}
}

// TestTheAPIServerAcceptsFollowWithARolloutPlan: Follow combines with
// batches, manual approval, onFailure Pause or Rollback and a disruption
// budget (ADR 0026).
func TestTheAPIServerAcceptsFollowWithARolloutPlan(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name    string
		rollout fleetv1.RolloutSpec
	}{
		{"Follow alone", fleetv1.RolloutSpec{Targets: fleetv1.RolloutTargetsFollow}},
		{"Follow with batches", fleetv1.RolloutSpec{Targets: fleetv1.RolloutTargetsFollow, Batches: []fleetv1.RolloutBatch{{Count: ptr(int32(1))}}}},
		{"Follow with manual approval", fleetv1.RolloutSpec{Targets: fleetv1.RolloutTargetsFollow, Approval: fleetv1.RolloutApprovalManual}},
		{"Follow with onFailure Rollback", fleetv1.RolloutSpec{Targets: fleetv1.RolloutTargetsFollow, OnFailure: fleetv1.RolloutOnFailureRollback}},
		{"Follow with a disruption budget", fleetv1.RolloutSpec{Targets: fleetv1.RolloutTargetsFollow,
			DisruptionBudget: &fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromInt32(1)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "follow-bounds", Namespace: e.ns},
				Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "none"}},
					Rollout: tc.rollout, Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
						Name: "api", Image: "registry.example.com/api:v1"}}}}}}
			if err := e.c.Create(e.ctx, d, &client.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Errorf("refused: %v", err)
			}
		})
	}
}

// plannedFollow creates Follow Deployment name selecting role=edge with
// rollout (its targets set to Follow).
func (e *env) plannedFollow(name string, rollout fleetv1.RolloutSpec, image string) {
	e.t.Helper()
	rollout.Targets = fleetv1.RolloutTargetsFollow
	d := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "edge"}},
			Rollout: rollout, Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
				Name: "api", Image: image}}}}}}
	if err := e.c.Create(e.ctx, d); err != nil {
		e.t.Fatal(err)
	}
}

// handedBy lists the devices the Deployment's rollout.batch-started
// transitions hand the revision to, in order.
func (e *env) handedBy(name string) []string {
	e.t.Helper()
	subj, _ := events.DeploymentRolloutSubject(e.ns, name)
	var out []string
	for r, err := range e.store.Replay(e.ctx, subj, events.FromStart()) {
		if err != nil {
			e.t.Fatal(err)
		}
		if r.Event.Type == events.TypeRolloutBatchStarted {
			d, err := events.Decode[events.RolloutTransition](r.Event)
			if err != nil {
				e.t.Fatal(err)
			}
			out = append(out, d.Released...)
		}
	}
	return out
}

// TestAFollowerOfAPlannedRolloutJoinsItsBatch: a Follow Deployment with
// a plan (two batches, manual approval, onFailure Pause, one device per
// site at a time). A device that joins during the rollout is placed in
// the plan's last batch (no batch has a selector; its
// rollout.target-added names the batch and its budget group): it waits
// for that batch and its approval, a pause holds a join, the budget
// hands it the revision one device of its site at a time, and the rollout succeeds only once it converged. After the end a
// newcomer is handed the revision at once, and a second one of the same
// site waits for the first (the budget still counts).
func TestAFollowerOfAPlannedRolloutJoinsItsBatch(t *testing.T) {
	e := newEnv(t)
	e.device("pd1", map[string]string{"role": "edge", "site": "a"})
	e.device("pd2", map[string]string{"role": "edge", "site": "a"})
	e.startOperator()
	e.plannedFollow("planned", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](1)}},
		Approval: fleetv1.RolloutApprovalManual, OnFailure: fleetv1.RolloutOnFailurePause,
		DisruptionBudget: &fleetv1.DisruptionBudget{LabelKey: "site", MaxUnavailable: intstr.FromInt32(1)}}, "registry.example.com/api:v1")
	rev := e.revisionOf("planned", 1)
	if diff := cmp.Diff([]int{1, 2}, rev.TargetBatches); diff != "" {
		t.Fatalf("target batches of pd1, pd2 (-want +got):\n%s", diff)
	}
	e.waitFor("batch 1 awaiting approval", func() bool { return strings.Contains(e.readyMessage("planned"), "batch 1 awaits approval") })

	e.device("pf1", map[string]string{"role": "edge", "site": "a"})
	e.waitFor("pf1 joined", func() bool { return e.followTransition("planned", "pf1").Device != "" })
	if tr := e.followTransition("planned", "pf1"); tr.Batch != 2 || tr.BudgetGroup != "a" {
		t.Errorf("pf1 joined batch %d, budget group %q: want the last batch (2), group a", tr.Batch, tr.BudgetGroup)
	}
	e.annotate("planned", request("approve", 1, 1, "ana", "req-1"))
	e.waitFor("batch 1 handed the revision", func() bool { return e.intentOf("pd1", "planned") == 1 })
	e.report("pd1", "planned", rev, events.WorkloadConverged, "")
	e.waitFor("batch 2 awaiting approval", func() bool { return strings.Contains(e.readyMessage("planned"), "batch 2 awaits approval") })
	if e.intentOf("pf1", "planned") != 0 {
		t.Fatal("pf1 was handed the revision before its batch was approved")
	}

	e.annotate("planned", request("pause", 1, 0, "bo", "req-2"))
	e.waitFor("the pause in the status", func() bool { return strings.Contains(e.readyMessage("planned"), "paused by bo") })
	e.device("pf2", map[string]string{"role": "edge", "site": "a"})
	e.annotate("planned", request("approve", 1, 2, "ana", "req-3"))
	e.waitFor("the approval recorded", func() bool { return len(e.requests("planned")) == 3 })
	if tr := e.followTransition("planned", "pf2"); tr.Device != "" {
		t.Error("pf2 joined while the rollout was paused")
	}
	e.annotate("planned", request("resume", 1, 0, "bo", "req-4"))
	e.waitFor("pf2 joined on the resume", func() bool { return e.followTransition("planned", "pf2").Device != "" })

	// One device of site a at a time: pd2, pf1, pf2 in id order.
	for _, dev := range []string{"pd2", "pf1", "pf2"} {
		e.waitFor(dev+" handed the revision", func() bool { return e.intentOf(dev, "planned") == 1 })
		if dev != "pf2" && e.get("planned").Status.Phase == fleetv1.PhaseSucceeded {
			t.Fatalf("the rollout succeeded before %s converged", dev)
		}
		e.report(dev, "planned", rev, events.WorkloadConverged, "")
	}
	e.waitPhase("planned", fleetv1.PhaseSucceeded)
	if diff := cmp.Diff([]string{"pd1", "pd2", "pf1", "pf2"}, e.handedBy("planned")); diff != "" {
		t.Errorf("batch-started lists (-want +got):\n%s", diff)
	}

	e.device("pf3", map[string]string{"role": "edge", "site": "a"})
	e.waitFor("pf3 handed the revision at once after the end", func() bool { return e.intentOf("pf3", "planned") == 1 })
	e.device("pf4", map[string]string{"role": "edge", "site": "a"})
	e.waitFor("pf4 among the followers in the status", func() bool {
		return slices.ContainsFunc(e.get("planned").Status.Followers, func(f fleetv1.Follower) bool { return f.Device == "pf4" })
	})
	if e.intentOf("pf4", "planned") != 0 || slices.Contains(e.handedBy("planned"), "pf4") {
		t.Fatal("pf4 was handed the revision while pf3, of the same site, had not converged (budget 1 per site)")
	}
	e.report("pf3", "planned", rev, events.WorkloadConverged, "")
	e.waitFor("pf4 handed the revision once pf3 converged", func() bool { return e.intentOf("pf4", "planned") == 1 })
	if d := e.get("planned"); d.Status.Phase != fleetv1.PhaseSucceeded {
		t.Errorf("phase %s after the end, want Succeeded", d.Status.Phase)
	}
}

// TestAFollowerOfAFailedBatchIsRolledBack: generation 2 of a Follow
// Deployment with onFailure Rollback: a follower handed generation 2 in
// its last batch is rolled back to generation 1 with the frozen targets
// when the batch fails, and a device enrolled after the failure is handed
// generation 1.
func TestAFollowerOfAFailedBatchIsRolledBack(t *testing.T) {
	e := newEnv(t)
	e.device("pd1", map[string]string{"role": "edge"})
	e.device("pd2", map[string]string{"role": "edge"})
	e.startOperator()
	e.plannedFollow("planned", fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: ptr[int32](1)}},
		OnFailure: fleetv1.RolloutOnFailureRollback}, "registry.example.com/api:v1")
	rev1 := e.revisionOf("planned", 1)
	for _, dev := range []string{"pd1", "pd2"} {
		e.waitFor(dev+" handed generation 1", func() bool { return e.intentOf(dev, "planned") == 1 })
		e.report(dev, "planned", rev1, events.WorkloadConverged, "")
	}
	e.waitPhase("planned", fleetv1.PhaseSucceeded)
	e.update("planned", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
	rev2 := e.revisionOf("planned", 2)
	e.waitFor("pd1 handed generation 2", func() bool { return e.intentOf("pd1", "planned") == 2 })
	e.report("pd1", "planned", rev2, events.WorkloadConverged, "")
	e.waitFor("pd2 handed generation 2", func() bool { return e.intentOf("pd2", "planned") == 2 })

	e.device("pf1", map[string]string{"role": "edge"})
	e.waitFor("pf1 handed generation 2 in the running last batch", func() bool { return e.intentOf("pf1", "planned") == 2 })
	e.report("pd2", "planned", rev2, events.WorkloadFailed, "image pull failed")
	e.waitPhase("planned", fleetv1.PhaseFailed)
	for _, dev := range []string{"pd1", "pd2", "pf1"} {
		e.waitFor(dev+" rolled back to generation 1", func() bool { return e.intentOf(dev, "planned") == 1 })
	}
	e.device("pf2", map[string]string{"role": "edge"})
	e.waitFor("pf2 handed generation 1, the last that succeeded", func() bool { return e.intentOf("pf2", "planned") == 1 })
}

// reportLabels publishes a device's inventory with the labels it claims,
// as a (hostile) agent would, and waits until the Device controller
// applied what it may of them.
func (e *env) reportLabels(device string, labels map[string]string, applied func(*fleetv1.Device) bool) {
	e.t.Helper()
	ev, err := events.New(events.Keys{Device: device}, events.DeviceInventory{OS: "debian-12", Arch: "arm64", AgentVersion: "1.0.0", Labels: labels})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.Report(e.ctx, ev); err != nil {
		e.t.Fatal(err)
	}
	e.waitFor("the Device controller applying "+device+"'s report", func() bool {
		var d fleetv1.Device
		return e.c.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: device}, &d) == nil && applied(&d)
	})
}

// TestADeviceCannotClaimItsWayIntoAFollowDeployment: a device's
// self-reported labels are placement data. A device outside the allowed
// groups that relabels itself to match does not join; a quarantined device
// that reports labels without blacklist stays quarantined and out; a
// group member that relabels itself joins as any matching device would,
// and the quarantined one joins once an administrator lifts the
// quarantine.
func TestADeviceCannotClaimItsWayIntoAFollowDeployment(t *testing.T) {
	e := newEnv(t)
	e.deviceController = true
	member, outsider, quarantined := "member-"+e.ns, "outsider-"+e.ns, "quarantined-"+e.ns
	frozen := "frozen-" + e.ns
	groups := &watchLookups{StaticGroups: operator.NewStaticGroups(map[string]map[string][]string{e.ns: {"lyon": {frozen, member, quarantined}}})}
	e.groups = groups
	e.device(frozen, map[string]string{"role": "analyzer"})
	// No admin label on role: the devices' reports set it (an admin's
	// label would stay the admin's).
	e.device(member, map[string]string{"site": "lyon"})
	e.device(outsider, map[string]string{"site": "lyon"})
	e.device(quarantined, map[string]string{"site": "lyon", fleetv1.LabelBlacklist: "true"})
	e.startOperator()
	e.followDeployment("api", map[string]string{"role": "analyzer"}, "lyon")
	rev := e.revisionOf("api", 1)
	if diff := cmp.Diff([]string{frozen}, rev.Targets); diff != "" {
		t.Fatalf("frozen targets (-want +got):\n%s", diff)
	}

	// A reason names a change from what the follow watch saw before:
	// the devices relabel themselves once it has looked at them.
	for _, d := range []string{member, outsider, quarantined} {
		e.waitFor("the follow watch looked at "+d, func() bool { return groups.lookedUp(e.ns, d) })
	}
	matching := func(d *fleetv1.Device) bool { return d.Labels["role"] == "analyzer" }
	e.reportLabels(outsider, map[string]string{"role": "analyzer"}, matching)
	e.reportLabels(quarantined, map[string]string{"role": "analyzer"}, matching)
	if d := e.getDevice(quarantined); d.Labels[fleetv1.LabelBlacklist] != "true" {
		t.Fatalf("the device's report removed its quarantine: labels %v", d.Labels)
	}
	e.reportLabels(member, map[string]string{"role": "analyzer"}, matching)
	e.waitFor("the group member that relabelled itself joined", func() bool { return e.intentOf(member, "api") == 1 })
	if diff := cmp.Diff([]string{"added " + member + " (labels changed)"}, e.followTransitions("api")); diff != "" {
		t.Errorf("follow transitions (-want +got):\n%s", diff)
	}

	e.relabel(quarantined, func(l map[string]string) { delete(l, fleetv1.LabelBlacklist) })
	e.waitFor("the device whose quarantine was lifted joined", func() bool { return e.intentOf(quarantined, "api") == 1 })
	want := []string{"added " + member + " (labels changed)", "added " + quarantined + " (quarantine lifted)"}
	if diff := cmp.Diff(want, e.followTransitions("api")); diff != "" {
		t.Errorf("follow transitions (-want +got):\n%s", diff)
	}
	if e.intentOf(outsider, "api") != 0 {
		t.Error("a device outside the allowed groups joined by relabelling itself")
	}
}

func (e *env) getDevice(name string) *fleetv1.Device {
	e.t.Helper()
	var d fleetv1.Device
	if err := e.c.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: name}, &d); err != nil {
		e.t.Fatal(err)
	}
	return &d
}

// TestAFollowDeploymentCatchesUpAfterARestart: the operator is stopped
// after a follower joined; meanwhile the follower is relabelled out and a
// new matching device is created. The restarted operator, resuming from its
// checkpoint, removes the first after the debounce and adds the second
// ("matches the target selector": it was first seen at the start), and
// each decision is appended once.
func TestAFollowDeploymentCatchesUpAfterARestart(t *testing.T) {
	e := newEnv(t)
	e.followDebounce = time.Second
	e.device("rpi-1", map[string]string{"role": "analyzer"})
	stop := e.startOperator()
	e.followDeployment("api", map[string]string{"role": "analyzer"})
	e.revisionOf("api", 1)
	first, second := "first-"+e.ns, "second-"+e.ns
	e.device(first, map[string]string{"role": "analyzer"})
	e.waitFor("the first follower joined", func() bool { return e.intentOf(first, "api") == 1 })
	stop()

	e.relabel(first, func(l map[string]string) { l["role"] = "other" })
	e.device(second, map[string]string{"role": "analyzer"})
	e.startOperator()
	e.waitFor("the second device joined", func() bool { return e.intentOf(second, "api") == 1 })
	e.waitFor("the relabelled follower left", func() bool { return e.intentOf(first, "api") == 0 })
	var d *fleetv1.Deployment
	e.waitFor("the status after the restart", func() bool {
		d = e.get("api")
		return d.Status.Counts.Total == 2 && d.Status.Counts.Followers == 1 && len(d.Status.Removed) == 1
	})
	// The second device was created just before the restart: "Device
	// created" when in the second the operator started, else "matches the
	// target selector" (seen first at the start). The departure has no
	// "was": the restarted operator never saw the labels before.
	got := e.followTransitions("api")
	for _, reason := range []string{"Device created", "matches the target selector"} {
		want := []string{"added " + first + " (Device created)", "added " + second + " (" + reason + ")",
			"removed " + first + " (labels no longer match the target selector: role=other)"}
		// In either order: on a slow start the departure's debounce may
		// pass before the runner caught up.
		if cmp.Diff(want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b })) == "" {
			return
		}
	}
	t.Errorf("follow transitions %q, want the first's join, the second's join, the first's departure, each once", got)
}

// followTransition returns the last rollout.target-added of device on the
// Deployment's rollout subject (the zero value: none).
func (e *env) followTransition(name, device string) events.RolloutTransition {
	e.t.Helper()
	subj, _ := events.DeploymentRolloutSubject(e.ns, name)
	var out events.RolloutTransition
	for r, err := range e.store.Replay(e.ctx, subj, events.FromStart()) {
		if err != nil {
			e.t.Fatal(err)
		}
		if r.Event.Type != events.TypeRolloutTargetAdded {
			continue
		}
		if d, err := events.Decode[events.RolloutTransition](r.Event); err == nil && d.Device == device {
			out = d
		}
	}
	return out
}

// TestAFailedFollowRevisionHandsNewcomersTheLastSucceeded: while the
// current revision of a Follow Deployment has failed, a device that comes
// to match receives the Deployment's last revision whose rollout
// succeeded; its rollout.target-added names that revision, the status
// lists it with the revision it was handed, and it loses it when it stops
// matching. Without a revision that succeeded, it receives nothing.
func TestAFailedFollowRevisionHandsNewcomersTheLastSucceeded(t *testing.T) {
	for _, tc := range []struct {
		name string
		// firstSucceeds: generation 1's rollout succeeds before
		// generation 2's fails.
		firstSucceeds bool
	}{
		{"a newcomer receives the last revision that succeeded", true},
		{"with no revision that succeeded a newcomer receives nothing", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.followDebounce = time.Second
			e.device("rpi-1", map[string]string{"role": "analyzer"})
			e.device("p-1", map[string]string{"role": "probe"})
			e.startOperator()
			e.followDeployment("api", map[string]string{"role": "analyzer"})
			e.followDeployment("probe", map[string]string{"role": "probe"})
			rev1 := e.revisionOf("api", 1)
			e.waitFor("the release of generation 1", func() bool { return e.intentOf("rpi-1", "api") == 1 })
			if tc.firstSucceeds {
				e.report("rpi-1", "api", rev1, events.WorkloadConverged, "")
				e.waitPhase("api", fleetv1.PhaseSucceeded)
				e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
				rev2 := e.revisionOf("api", 2)
				e.waitFor("the release of generation 2", func() bool { return e.intentOf("rpi-1", "api") == 2 })
				e.report("rpi-1", "api", rev2, events.WorkloadFailed, "image pull failed")
			} else {
				e.report("rpi-1", "api", rev1, events.WorkloadFailed, "image pull failed")
			}
			failed := e.waitPhase("api", fleetv1.PhaseFailed)

			late := "late-" + e.ns
			start := time.Now()
			e.device(late, map[string]string{"role": "analyzer"})
			if !tc.firstSucceeds {
				// The follow watch judges Devices one at a time, in order,
				// and the runner settles its changes in order: once a
				// Device created after the newcomer joined another Follow
				// Deployment, the newcomer was decided.
				marker := "marker-" + e.ns
				e.device(marker, map[string]string{"role": "probe"})
				e.waitFor("the device created after the newcomer joined the probe", func() bool { return e.intentOf(marker, "probe") == 1 })
				if got := e.followTransitions("api"); len(got) != 0 {
					t.Errorf("follow transitions %q, want none: no revision succeeded", got)
				}
				if e.intentOf(late, "api") != 0 {
					t.Error("a newcomer received the failed revision")
				}
				return
			}
			e.waitFor("the last revision that succeeded handed to the newcomer", func() bool { return e.intentOf(late, "api") == 1 })
			t.Logf("the newcomer held generation 1 %s after its Device was created", time.Since(start).Round(time.Millisecond))
			tr := e.followTransition("api", late)
			want := events.RolloutTransition{UID: string(failed.UID), Generation: 2, RevisionID: failed.Status.Revision.ID, Device: late,
				Follow: true, Reason: "Device created", Change: "role=analyzer", HandedGeneration: 1, HandedRevisionID: rev1.RevisionID}
			if diff := cmp.Diff(want, tr, cmpopts.IgnoreFields(events.RolloutTransition{}, "Counts"), cmpopts.IgnoreUnexported(events.RolloutTransition{})); diff != "" {
				t.Errorf("rollout.target-added (-want +got):\n%s", diff)
			}
			var d *fleetv1.Deployment
			e.waitFor("the follower in the status", func() bool {
				d = e.get("api")
				return len(d.Status.Followers) == 1
			})
			wantF := []fleetv1.Follower{{Device: late, Reason: "Device created", Change: "role=analyzer",
				Revision: &fleetv1.RevisionRef{UID: string(failed.UID), Generation: 1, ID: rev1.RevisionID}}}
			if diff := cmp.Diff(wantF, d.Status.Followers, cmpIgnoreFollowerTime); diff != "" {
				t.Errorf("status.followers (-want +got):\n%s", diff)
			}
			if d.Status.Phase != fleetv1.PhaseFailed || d.Status.Counts.Total != 1 {
				t.Errorf("phase %s counts %+v, want Failed with its one frozen target: the newcomer runs another revision", d.Status.Phase, d.Status.Counts)
			}

			e.relabel(late, func(l map[string]string) { l["role"] = "other" })
			e.waitFor("the revision taken back from the newcomer that left", func() bool { return e.intentOf(late, "api") == 0 })
			if e.intentOf("rpi-1", "api") != 2 {
				t.Error("the frozen target lost its revision")
			}
		})
	}
}

// TestAGroupMembershipChangeAloneMovesAFollower: with allowedGroups, a
// matching device that enters an allowed group joins the Follow
// Deployment, and one that leaves every allowed group loses it at once,
// with no change to its Device: the follow watch watches the group source.
// Each transition names the membership change.
func TestAGroupMembershipChangeAloneMovesAFollower(t *testing.T) {
	e := newEnv(t)
	frozen, member := "frozen-"+e.ns, "member-"+e.ns
	groups := &watchLookups{StaticGroups: operator.NewStaticGroups(map[string]map[string][]string{e.ns: {"lyon": {frozen}}})}
	e.groups = groups
	e.device(frozen, map[string]string{"role": "analyzer"})
	e.device(member, map[string]string{"role": "analyzer"})
	// Created before the operator starts: the watch first sees the
	// devices with the Deployment, so it knows their groups before.
	e.followDeployment("api", map[string]string{"role": "analyzer"}, "lyon")
	e.startOperator()
	if rev := e.revisionOf("api", 1); !slices.Equal(rev.Targets, []string{frozen}) {
		t.Fatalf("frozen targets %v, want [%s]", rev.Targets, frozen)
	}

	// The watch judges the member (not in lyon: no match) on its own
	// time; only a change after it looked is a membership change to it.
	e.waitFor("the follow watch looked up the member's groups", func() bool { return groups.lookedUp(e.ns, member) })
	start := time.Now()
	groups.Set(map[string]map[string][]string{e.ns: {"lyon": {frozen, member}, "paris": {member}}})
	e.waitFor("the device that entered an allowed group joined", func() bool { return e.intentOf(member, "api") == 1 })
	t.Logf("the membership change reached the device's fleet-intent value in %s", time.Since(start).Round(time.Millisecond))
	if got := e.followTransition("api", member); got.Reason != "group membership" || got.Change != "groups lyon,paris (was none)" {
		t.Errorf("rollout.target-added reason %q change %q, want %q and %q", got.Reason, got.Change, "group membership", "groups lyon,paris (was none)")
	}

	groups.Set(map[string]map[string][]string{e.ns: {"lyon": {frozen}, "paris": {member}}})
	e.waitFor("the device that left the allowed group lost the revision", func() bool { return e.intentOf(member, "api") == 0 })
	want := []string{"added " + member + " (group membership)", "removed " + member + " (not a member of an allowed group (lyon))"}
	if diff := cmp.Diff(want, e.followTransitions("api")); diff != "" {
		t.Errorf("follow transitions (-want +got):\n%s", diff)
	}
	if e.intentOf(frozen, "api") != 1 {
		t.Error("the frozen target lost the revision")
	}
}

// watchLookups is a StaticGroups that notes the devices whose groups the
// follow watch (operator/followers) looked up, so that a test changes a
// device's groups only once the watch knows what they were: the group
// source answers before the lookup is noted, and a change that comes
// while the watch still judges the device queues it again. Lookups of the
// rollout's target resolution are not noted.
type watchLookups struct {
	*operator.StaticGroups
	mu     sync.Mutex
	looked map[string]bool
}

// Groups implements operator.GroupSource.
func (w *watchLookups) Groups(ctx context.Context, namespace, device string) ([]string, error) {
	gs, err := w.StaticGroups.Groups(ctx, namespace, device)
	if calledFrom("/operator/followers.(*Watch).Reconcile") {
		w.mu.Lock()
		if w.looked == nil {
			w.looked = map[string]bool{}
		}
		w.looked[namespace+"/"+device] = true
		w.mu.Unlock()
	}
	return gs, err
}

// lookedUp reports whether the follow watch has looked up the groups of
// namespace/device.
func (w *watchLookups) lookedUp(namespace, device string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.looked[namespace+"/"+device]
}

// calledFrom reports whether a function whose name ends with suffix is
// on the caller's stack.
func calledFrom(suffix string) bool {
	pcs := make([]uintptr, 64)
	frames := goruntime.CallersFrames(pcs[:goruntime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if strings.HasSuffix(f.Function, suffix) {
			return true
		}
		if !more {
			return false
		}
	}
}

// TestTheFollowWatchForgetsADeploymentThatNoLongerFollows: the watch's
// memory of what it sent holds one judgement per Device of each Follow
// Deployment; a Deployment deleted, or switched to Frozen, leaves none.
func TestTheFollowWatchForgetsADeploymentThatNoLongerFollows(t *testing.T) {
	e, w, _ := startFollowWatch(t, "fw", nil, true)
	e.followDeployment("keep", map[string]string{"role": "analyzer"})
	e.followDeployment("gone", map[string]string{"role": "analyzer"})
	e.device("rpi-1", map[string]string{"role": "analyzer"})
	e.device("rpi-2", map[string]string{"role": "analyzer"})
	remembered := func(n int) func() bool { return func() bool { return w.Remembered() == n } }
	e.waitFor("a judgement per Device and Follow Deployment", remembered(4))

	gone := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: e.ns}}
	if err := e.c.Delete(e.ctx, gone); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the deleted Deployment's judgements forgotten", remembered(2))

	e.update("keep", func(d *fleetv1.Deployment) { d.Spec.Rollout.Targets = fleetv1.RolloutTargetsFrozen })
	e.waitFor("the judgements of the Deployment switched to Frozen forgotten", remembered(0))
}

// startFollowWatch runs the follow watch alone on a manager of a
// namespace of its own (prefix), its client c when set (else the
// manager's). Unless drain, the test reads the watch's changes from the
// channel returned.
func startFollowWatch(t *testing.T, prefix string, c func(client.Client) client.Client, drain bool) (*env, *operator.FollowWatch, <-chan operator.FollowChange) {
	t.Helper()
	ctx, srv, kc, ns := cluster(t, prefix)
	t.Cleanup(func() { removeAll(t, kc, ns) })
	e := &env{t: t, ctx: ctx, srv: srv, c: kc, ns: ns}
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(srv.RESTConfig(), ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0", Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Controller: config.Controller{SkipNameValidation: ptr(true)}})
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan operator.FollowChange, 64)
	wc := mgr.GetClient()
	if c != nil {
		wc = c(wc)
	}
	w := &operator.FollowWatch{Client: wc, Out: out}
	if err := w.SetupWithManager(mgr); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	if drain {
		go func() { // the runner's end of the channel
			for {
				select {
				case <-out:
				case <-mctx.Done():
					return
				}
			}
		}()
	}
	return e, w, out
}

// deploymentLists is a client that counts the Deployment lists it
// answered: the follow watch lists them in each Reconcile.
type deploymentLists struct {
	client.Client
	n atomic.Int64
}

func (c *deploymentLists) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	err := c.Client.List(ctx, l, opts...)
	if _, ok := l.(*fleetv1.DeploymentList); ok {
		c.n.Add(1)
	}
	return err
}

// TestADeviceJudgedBeforeItsFollowDeploymentWasKnownStillJoins: a Device
// and a Follow Deployment applied together (a GitOps repository's first
// sync) may reach the operator's cache in either order; a Device the
// follow watch judged while no Follow Deployment was known is judged again
// when one comes, and again at each new generation, worded as a device
// seen for the first time, never as a change the watch did not see (the
// old wording, "group membership", named a change nobody made).
func TestADeviceJudgedBeforeItsFollowDeploymentWasKnownStillJoins(t *testing.T) {
	var lists *deploymentLists
	e, _, out := startFollowWatch(t, "fj", func(c client.Client) client.Client { lists = &deploymentLists{Client: c}; return lists }, false)
	dev := e.device("early", map[string]string{"role": "analyzer"})
	// The watch has judged the Device against no Deployment: the list of
	// its Reconcile came back before the Deployment was created.
	e.waitFor("the watch's Reconcile of the Device", func() bool { return lists.n.Load() > 0 })
	e.followDeployment("api", map[string]string{"role": "analyzer"})
	next := func(what string) operator.FollowChange {
		t.Helper()
		for {
			select {
			case ch := <-out:
				if ch.Device == dev.Name && ch.Deployment == "api" {
					return ch
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("no follow change of %s for %s within 30 s", dev.Name, what)
			}
		}
	}
	ch := next("the Deployment created")
	// Created after the watch started, the Device was never judged
	// against the Deployment: a device created, as the watch first sees
	// it.
	if !ch.Match || ch.Generation != 1 || ch.Reason != "Device created" || ch.Change != "role=analyzer" {
		t.Errorf("change %+v, want a match of generation 1, \"Device created\", role=analyzer", ch)
	}
	e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
	ch = next("generation 2")
	if !ch.Match || ch.Generation != 2 || ch.Reason != "matches the target selector" {
		t.Errorf("change %+v, want a match of generation 2, \"matches the target selector\"", ch)
	}
}

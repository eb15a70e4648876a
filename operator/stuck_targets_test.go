package operator_test

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// TestAStuckTargetDoesNotHoldARolloutOpen: a frozen target that is
// deleted, quarantined or silent past the target timeout is removed from
// the revision's accounting (rollout.target-removed), named in status, and
// the rollout ends on the others.
func TestAStuckTargetDoesNotHoldARolloutOpen(t *testing.T) {
	tests := []struct {
		name string
		// stick makes device stuck; it runs once the rollout released
		// the revision to every target.
		stick      func(e *env, device string)
		timeout    time.Duration
		wantReason string
	}{
		{"a deleted target is removed", func(e *env, device string) {
			var d fleetv1.Device
			d.Name, d.Namespace = device, e.ns
			if err := e.c.Delete(e.ctx, &d); err != nil {
				e.t.Fatal(err)
			}
		}, 0, "Device deleted"},
		{"a quarantined target is removed", func(e *env, device string) {
			var d fleetv1.Device
			d.Name, d.Namespace = device, e.ns
			e.waitFor("the label", func() bool {
				if err := e.c.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: device}, &d); err != nil {
					return false
				}
				d.Labels[fleetv1.LabelBlacklist] = "true"
				return e.c.Update(e.ctx, &d) == nil
			})
		}, 0, "Device quarantined"},
		// 6 s: the other target's report, sent at once, is folded within
		// it on a loaded machine too.
		{"a target silent past the target timeout is removed", func(*env, string) {}, 6 * time.Second,
			"no result (Converged or Failed) within the target timeout (6s) of being handed the revision"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			e.targetTimeout = tc.timeout
			ok, stuck := "ok-"+e.ns, "stuck-"+e.ns
			e.device(ok, map[string]string{"role": "stuck"})
			e.device(stuck, map[string]string{"role": "stuck"})
			e.startOperator()
			e.deployment("api", map[string]string{"role": "stuck"})
			rev := e.revisionOf("api", 1)
			e.report(ok, "api", rev, events.WorkloadConverged, "")
			e.waitPhase("api", fleetv1.PhaseProgressing)
			tc.stick(e, stuck)
			d := e.waitPhase("api", fleetv1.PhaseSucceeded)
			if diff := cmp.Diff([]fleetv1.RemovedTarget{{Device: stuck, Reason: tc.wantReason}}, d.Status.Removed); diff != "" {
				t.Errorf("status.removed (-want +got):\n%s", diff)
			}
			if c := d.Status.Counts; c.Total != 1 || c.Succeeded != 1 || c.Removed != 1 {
				t.Errorf("counts %+v, want 1 of 1 succeeded, 1 removed", c)
			}
			if c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionReady); c == nil || c.Status != metav1.ConditionTrue {
				t.Errorf("Ready %+v", c)
			}
			if tr := e.transitions("api"); !slices.Contains(tr, events.TypeRolloutTargetRemoved) {
				t.Errorf("transitions %v lack %s", tr, events.TypeRolloutTargetRemoved)
			}
		})
	}
}

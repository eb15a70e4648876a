package operator_test

import (
	"context"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

func TestResolveTargetsExcludes(t *testing.T) {
	dup := metav1.Condition{Type: fleetv1.ConditionOnline, Status: metav1.ConditionFalse, Reason: fleetv1.ReasonDuplicateDeviceID}
	tests := []struct {
		name   string
		device fleetv1.Device
	}{
		{"a quarantined device", fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"r": "x", "blacklist": "true"}}}},
		{"a Device marked DuplicateDeviceID", fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: "x", Labels: map[string]string{"r": "x"}},
			Status: fleetv1.DeviceStatus{Conditions: []metav1.Condition{dup}}}},
	}
	d := &fleetv1.Deployment{Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"r": "x"}}}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ok := fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"r": "x"}}}
			res, err := operator.ResolveTargets(context.Background(), d, []fleetv1.Device{ok, tc.device}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Targets, []string{"a"}) {
				t.Errorf("targets %v, want only a", res.Targets)
			}
		})
	}
}

// TestAYoungerNamesakeIsNeverATarget: a Device whose id an older Device in
// another namespace owns is not a target, also before the Device
// controller marked it (this operator runs none).
func TestAYoungerNamesakeIsNeverATarget(t *testing.T) {
	e := newEnv(t)
	id := "dup-" + e.ns
	other := e.ns + "-other"
	if err := e.c.Create(e.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}); err != nil {
		t.Fatal(err)
	}
	owner := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: other, Labels: map[string]string{"role": "dup"}},
		Spec: fleetv1.DeviceSpec{IdentitySubject: "sub-" + id}}
	if err := e.c.Create(e.ctx, owner); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the API server's clock to pass the owner's creation second", func() bool {
		return metav1.Now().Truncate(1e9).After(owner.CreationTimestamp.Time)
	})
	e.device(id, map[string]string{"role": "dup"})
	e.device("served-"+e.ns, map[string]string{"role": "dup"})
	e.startOperator()
	e.deployment("api", map[string]string{"role": "dup"})
	if rev := e.revisionOf("api", 1); !slices.Equal(rev.Targets, []string{"served-" + e.ns}) {
		t.Errorf("targets %v, want only served-%s (%s belongs to namespace %s)", rev.Targets, e.ns, id, other)
	}
}

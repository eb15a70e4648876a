package operator_test

import (
	"context"
	"slices"
	"testing"

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

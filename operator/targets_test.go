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

func TestResolveTaskRunTargets(t *testing.T) {
	dup := metav1.Condition{Type: fleetv1.ConditionOnline, Status: metav1.ConditionFalse, Reason: fleetv1.ReasonDuplicateDeviceID}
	devices := []fleetv1.Device{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "b", Labels: map[string]string{"r": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "a", Labels: map[string]string{"r": "x", "canary": "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "q", Labels: map[string]string{"r": "x", "blacklist": "true"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "d", Labels: map[string]string{"r": "x"}},
			Status: fleetv1.DeviceStatus{Conditions: []metav1.Condition{dup}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "o", Labels: map[string]string{"r": "other"}}},
	}
	tests := []struct {
		name       string
		groups     []string
		source     operator.GroupSource
		want       []string
		wantReason string
	}{
		{"the selector's devices minus quarantined and duplicate ids, canary label or not, sorted", nil, nil, []string{"a", "b"}, fleetv1.ReasonResolved},
		{"allowedGroups with a group source keeps the members", []string{"lab-group"},
			operator.NewStaticGroups(map[string]map[string][]string{"lab": {"lab-group": {"b", "q"}}}), []string{"b"}, fleetv1.ReasonResolved},
		{"allowedGroups without a group source matches nothing (fail closed)", []string{"lab-group"}, nil, nil, fleetv1.ReasonNoGroupSource},
		{"a group without eligible members matches nothing and says so", []string{"empty"},
			operator.NewStaticGroups(map[string]map[string][]string{}), nil, fleetv1.ReasonNoMatchingDevices},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := &fleetv1.TaskRun{Spec: fleetv1.TaskRunSpec{Task: fleetv1.TaskSystemUpgrade, AllowedGroups: tc.groups,
				TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"r": "x"}}}}
			res, err := operator.ResolveTaskRunTargets(context.Background(), tr, devices, tc.source)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Targets, tc.want) || res.Reason != tc.wantReason || len(res.Canaries) != 0 {
				t.Errorf("targets %v canaries %v reason %s (%s), want %v, none, %s", res.Targets, res.Canaries, res.Reason, res.Message, tc.want, tc.wantReason)
			}
		})
	}
}

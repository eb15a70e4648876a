package deployments

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/internal/targets"
)

// TestMaintenanceWindowsAreFrozenOnlyWhenSet: a Deployment without windows
// writes the revision bytes of before; one with a switch window, and a
// fetch window with prefetch, freezes them in the revision (ADR 0029).
func TestMaintenanceWindowsAreFrozenOnlyWhenSet(t *testing.T) {
	devices := []fleetv1.Device{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-2", Labels: map[string]string{"role": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-1", Labels: map[string]string{"role": "x", "canary": "true"}}},
	}
	trimmed := strings.TrimSuffix(beforePlans, "}")
	for _, tc := range []struct {
		name    string
		rollout fleetv1.RolloutSpec
		want    string
	}{
		{"without windows the bytes are those of before", fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate}, beforePlans},
		{"a switch window is frozen with the revision", fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate,
			MaintenanceWindow: &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "2h"}},
			trimmed + `,"window":{"start":"02:00","duration":"2h"}}`},
		{"a fetch window is frozen beside prefetch and the switch window", fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate, Prefetch: true,
			MaintenanceWindow: &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "2h"}, FetchWindow: &fleetv1.MaintenanceWindow{Start: "23:00", Duration: "3h"}},
			trimmed + `,"prefetch":true,"window":{"start":"02:00","duration":"2h"},"fetchWindow":{"start":"23:00","duration":"3h"}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := planTestDeployment(tc.rollout)
			res, err := ResolveTargets(context.Background(), d, devices, nil)
			if err != nil {
				t.Fatal(err)
			}
			evs, _, err := RevisionEvents(d, res)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(evs[len(evs)-1].Data)); len(evs) != 1 || diff != "" {
				t.Errorf("%d events; the revision's data (-want +got):\n%s", len(evs), diff)
			}
		})
	}
}

// TestABadMaintenanceWindowFreezesNoRevision: a window the API server
// would refuse (a Deployment stored before the CRD had the rule) freezes
// nothing and says which field and how to fix it.
func TestABadMaintenanceWindowFreezesNoRevision(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rollout fleetv1.RolloutSpec
		want    []string
	}{
		{"a switch window of 25 hours", fleetv1.RolloutSpec{MaintenanceWindow: &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "25h"}},
			[]string{"spec.rollout.maintenanceWindow", "from 1m to 24h"}},
		{"a fetch window start of 2:00", fleetv1.RolloutSpec{Prefetch: true, FetchWindow: &fleetv1.MaintenanceWindow{Start: "2:00", Duration: "1h"}},
			[]string{"spec.rollout.fetchWindow", "HH:MM"}},
		{"a fetch window without prefetch", fleetv1.RolloutSpec{FetchWindow: &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "1h"}},
			[]string{"spec.rollout.fetchWindow needs spec.rollout.prefetch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := planTestDeployment(tc.rollout)
			evs, _, err := RevisionEvents(d, targets.Resolution{Targets: []string{"rpi-1"}, Canaries: []string{}})
			if err == nil {
				t.Fatalf("no error; %d events", len(evs))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

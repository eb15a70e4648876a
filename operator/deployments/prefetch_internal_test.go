package deployments

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

func TestPrefetchIsFrozenOnlyWhenSet(t *testing.T) {
	devices := []fleetv1.Device{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-2", Labels: map[string]string{"role": "x"}}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "lab", Name: "rpi-1", Labels: map[string]string{"role": "x", "canary": "true"}}},
	}
	for _, tc := range []struct {
		name     string
		prefetch bool
		want     string
	}{
		{"without prefetch the bytes are those of before", false, beforePlans},
		{"prefetch is frozen with the revision", true, strings.TrimSuffix(beforePlans, "}") + `,"prefetch":true}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := planTestDeployment(fleetv1.RolloutSpec{Strategy: fleetv1.RolloutImmediate, Prefetch: tc.prefetch})
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

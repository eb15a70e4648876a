package operator_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

func TestADeploymentWhoseTargetsAreChunkedRollsOutAcrossAnOperatorRestart(t *testing.T) {
	t.Cleanup(operator.SetRevisionChunkBytes(20)) // a chunk per device or two
	e := newEnv(t)
	e.device("rpi-1", map[string]string{"role": "analyzer", "canary": "true"})
	e.device("rpi-2", map[string]string{"role": "analyzer"})
	e.device("rpi-3", map[string]string{"role": "analyzer"})
	stop := e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})

	// The revision comes last, after its chunks.
	var created events.DeploymentRevisionCreated
	e.waitFor("the chunked revision", func() bool {
		recs := e.intent("api")
		if len(recs) < 2 {
			return false
		}
		d, err := events.Decode[events.DeploymentRevisionCreated](recs[len(recs)-1].Event)
		created = d
		return err == nil && d.TargetChunks == len(recs)-1 && len(d.Targets) == 0
	})
	if created.TargetsDigest != events.TargetsDigest([]string{"rpi-1", "rpi-2", "rpi-3"}) {
		t.Errorf("digest %s", created.TargetsDigest)
	}
	e.waitPhase("api", fleetv1.PhaseCanary)
	c := meta.FindStatusCondition(e.get("api").Status.Conditions, fleetv1.ConditionTargetsResolved)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != fleetv1.ReasonResolved {
		t.Errorf("TargetsResolved condition %+v", c)
	}
	stop()

	rev := created
	rev.Targets, rev.Canaries = []string{"rpi-1", "rpi-2", "rpi-3"}, []string{"rpi-1"}
	e.report("rpi-1", "api", rev, events.WorkloadConverged, "")
	e.startOperator()
	e.waitFor("release to the rest", func() bool { return e.intentOf("rpi-3", "api") == 1 })
	e.report("rpi-2", "api", rev, events.WorkloadConverged, "")
	e.report("rpi-3", "api", rev, events.WorkloadConverged, "")
	st := e.waitPhase("api", fleetv1.PhaseSucceeded).Status
	if st.Counts.Total != 3 || st.Counts.Canaries != 1 {
		t.Errorf("counts %+v", st.Counts)
	}
	want := []events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanariesConverged,
		events.TypeRolloutReleased, events.TypeRolloutSucceeded}
	if diff := cmp.Diff(want, e.transitions("api")); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
}

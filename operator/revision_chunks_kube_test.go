package operator_test

import (
	"strings"
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
	// TargetsResolved is the Deployment controller's, written apart
	// from the runner's phase: waited for on its own.
	e.waitFor("TargetsResolved True, Resolved", func() bool {
		c := meta.FindStatusCondition(e.get("api").Status.Conditions, fleetv1.ConditionTargetsResolved)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == fleetv1.ReasonResolved
	})
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

func TestATaskRunWhoseTargetsAreChunkedIsCreatedOnceAndRunsAcrossAnOperatorRestart(t *testing.T) {
	t.Cleanup(operator.SetTaskRunChunkBytes(20)) // a chunk per device
	e := newEnv(t)
	ids := []string{e.id("rpi-1"), e.id("rpi-2"), e.id("rpi-3")}
	for _, id := range ids {
		e.device(id, map[string]string{"role": "analyzer"})
	}
	// Two operators race for the creation.
	stopA := e.startOperator()
	e.startOperator()
	tr := e.taskRun("upgrade", fleetv1.TaskSystemUpgrade, map[string]string{"role": "analyzer"})

	// The creation comes last, after its chunks, once.
	var created events.TaskRunCreated
	e.waitFor("the chunked creation", func() bool {
		recs := e.taskIntent("upgrade")
		if len(recs) < 2 {
			return false
		}
		d, err := events.Decode[events.TaskRunCreated](recs[len(recs)-1].Event)
		created = d
		return err == nil && d.TargetChunks > 1 && len(d.Targets) == 0
	})
	if created.UID != string(tr.UID) || created.TargetsDigest != events.TargetsDigest(ids) {
		t.Errorf("the creation: uid %s, digest %s; want %s and the digest of %v", created.UID, created.TargetsDigest, tr.UID, ids)
	}
	e.waitFor("every target's task entry", func() bool {
		for _, id := range ids {
			if !e.hasTask(id, "upgrade") {
				return false
			}
		}
		return true
	})
	e.waitFor("TargetsResolved naming the three targets", func() bool {
		c := meta.FindStatusCondition(e.getTaskRun("upgrade").Status.Conditions, fleetv1.ConditionTargetsResolved)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == fleetv1.ReasonResolved && strings.HasPrefix(c.Message, "3 targets")
	})
	stopA()

	whole := created
	whole.Targets = ids
	e.taskReport(ids[0], whole, "upgrade", events.TaskSucceeded, "", events.TaskStatus{})
	e.startOperator()
	e.taskReport(ids[1], whole, "upgrade", events.TaskSucceeded, "", events.TaskStatus{})
	e.taskReport(ids[2], whole, "upgrade", events.TaskSucceeded, "", events.TaskStatus{})
	got := e.waitTaskPhase("upgrade", fleetv1.TaskRunSucceeded)
	if diff := cmp.Diff(fleetv1.TaskRunCounts{Targets: 3, Succeeded: 3}, got.Status.Counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	n := 0
	for _, r := range e.taskIntent("upgrade") {
		if r.Event.Type == events.TypeTaskRunCreated {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d taskrun.created events, want exactly 1", n)
	}
}

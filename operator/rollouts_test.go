package operator_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/projections"
)

// report publishes a device's workload status like an agent does (never
// acknowledged) and waits until it is stored.
func (e *env) report(device, deployment string, rev events.DeploymentRevisionCreated, phase events.WorkloadPhase, errText string) {
	e.t.Helper()
	if err := e.store.Report(e.ctx, e.workloadReport(device, deployment, rev, phase, errText)); err != nil {
		e.t.Fatal(err)
	}
}

// workloadReport is a device's workload status as an agent builds it.
func (e *env) workloadReport(device, deployment string, rev events.DeploymentRevisionCreated, phase events.WorkloadPhase, errText string) events.Event {
	e.t.Helper()
	ev, err := events.New(events.Keys{Device: device}, events.WorkloadStatus{Namespace: e.ns, Deployment: deployment,
		UID: rev.UID, Generation: rev.Generation, RevisionID: rev.RevisionID, Phase: phase, Error: errText, Since: time.Now().UTC()},
		events.WithCorrelation(rev.UID, rev.Generation))
	if err != nil {
		e.t.Fatal(err)
	}
	return ev
}

// transitions lists the rollout transition types of a Deployment in order.
func (e *env) transitions(name string) []events.Type {
	e.t.Helper()
	subj, _ := events.DeploymentRolloutSubject(e.ns, name)
	var out []events.Type
	for r, err := range e.store.Replay(e.ctx, subj, events.FromStart()) {
		if _, skip := events.AsRecordError(err); skip {
			continue // not a transition (a test stored garbage here)
		}
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r.Event.Type)
	}
	return out
}

// intentOf returns the generation of deployment in a device's KV value (0:
// no entry or no key).
func (e *env) intentOf(device, deployment string) int64 {
	e.t.Helper()
	entry, err := e.kv.Get(e.ctx, device)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var v projections.DeviceIntent
	if err := json.Unmarshal(entry.Value(), &v); err != nil {
		e.t.Fatal(err)
	}
	for _, d := range v.Deployments {
		if d.Namespace == e.ns && d.Name == deployment {
			return d.Generation
		}
	}
	return 0
}

func (e *env) waitPhase(name string, phase fleetv1.DeploymentPhase) *fleetv1.Deployment {
	e.t.Helper()
	var d *fleetv1.Deployment
	e.waitFor("phase "+string(phase), func() bool {
		d = e.get(name)
		return d.Status.Phase == phase
	})
	return d
}

func TestCanariesConvergeThenTheRestIsReleasedThenTheRolloutSucceeds(t *testing.T) {
	e := newEnv(t)
	e.device("rpi-1", map[string]string{"role": "analyzer", "canary": "true"})
	e.device("rpi-2", map[string]string{"role": "analyzer"})
	e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})
	rev := e.revisionOf("api", 1)

	e.waitFor("the canary's intent", func() bool { return e.intentOf("rpi-1", "api") == 1 })
	d := e.waitPhase("api", fleetv1.PhaseCanary)
	if e.intentOf("rpi-2", "api") != 0 {
		t.Fatal("a non-canary received the revision before the canaries converged")
	}
	if d.Status.Revision == nil || d.Status.Revision.Generation != 1 || d.Status.Counts.Total != 2 || d.Status.Counts.Canaries != 1 {
		t.Errorf("status %+v", d.Status)
	}

	e.report("rpi-1", "api", rev, events.WorkloadConverged, "")
	e.waitFor("release to the rest", func() bool { return e.intentOf("rpi-2", "api") == 1 })
	e.waitPhase("api", fleetv1.PhaseProgressing)

	e.report("rpi-2", "api", rev, events.WorkloadConverged, "")
	d = e.waitPhase("api", fleetv1.PhaseSucceeded)
	if diff := cmp.Diff(fleetv1.RolloutCounts{Total: 2, Succeeded: 2, Canaries: 1, CanariesSucceeded: 1}, d.Status.Counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionReady); c == nil || c.Reason != fleetv1.ReasonRolloutSucceeded {
		t.Errorf("Ready condition %+v", c)
	}
	want := []events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanariesConverged,
		events.TypeRolloutReleased, events.TypeRolloutSucceeded}
	if diff := cmp.Diff(want, e.transitions("api")); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}

	t.Run("a spec change makes a new revision and the status follows it", func(t *testing.T) {
		e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
		rev2 := e.revisionOf("api", 2)
		e.waitFor("status of revision 2", func() bool {
			s := e.get("api").Status
			return s.Revision != nil && s.Revision.Generation == 2 && s.Phase == fleetv1.PhaseCanary && s.Counts.Succeeded == 0
		})
		if e.intentOf("rpi-2", "api") != 1 {
			t.Error("the non-canary lost revision 1 before revision 2 was released to it")
		}
		e.report("rpi-1", "api", rev2, events.WorkloadConverged, "")
		e.report("rpi-2", "api", rev2, events.WorkloadConverged, "")
		e.waitPhase("api", fleetv1.PhaseSucceeded)
		if e.intentOf("rpi-2", "api") != 2 {
			t.Error("the non-canary did not get revision 2")
		}
	})
}

func TestAFailingCanaryBlocksRelease(t *testing.T) {
	e := newEnv(t)
	e.device("rpi-1", map[string]string{"role": "analyzer", "canary": "true"})
	e.device("rpi-2", map[string]string{"role": "analyzer"})
	e.device("rpi-3", map[string]string{"role": "analyzer"})
	e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})
	rev := e.revisionOf("api", 1)
	e.waitFor("the canary's intent", func() bool { return e.intentOf("rpi-1", "api") == 1 })

	e.report("rpi-1", "api", rev, events.WorkloadFailed, "init container exited with 3")
	d := e.waitPhase("api", fleetv1.PhaseFailed)
	if d.Status.LatestFailure == nil || d.Status.LatestFailure.Device != "rpi-1" || d.Status.LatestFailure.Error != "init container exited with 3" {
		t.Errorf("latest failure %+v", d.Status.LatestFailure)
	}
	if c := meta.FindStatusCondition(d.Status.Conditions, fleetv1.ConditionReady); c == nil || c.Reason != fleetv1.ReasonCanaryFailed {
		t.Errorf("Ready condition %+v", c)
	}
	for _, dev := range []string{"rpi-2", "rpi-3"} {
		if _, err := e.kv.History(e.ctx, dev); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s: the KV key was written (history: %v); a failed canary must block release", dev, err)
		}
	}
	want := []events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanaryFailed, events.TypeRolloutFailed}
	if diff := cmp.Diff(want, e.transitions("api")); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	if e.intentOf("rpi-1", "api") != 1 {
		t.Error("the failed canary's revision was rolled back")
	}
}

func TestAnOperatorKilledMidRolloutLosesAndDuplicatesNothing(t *testing.T) {
	e := newEnv(t)
	e.device("rpi-1", map[string]string{"role": "analyzer", "canary": "true"})
	e.device("rpi-2", map[string]string{"role": "analyzer"})
	stop := e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})
	rev := e.revisionOf("api", 1)
	e.waitPhase("api", fleetv1.PhaseCanary)
	stop()
	if _, err := e.obj.GetBytes(e.ctx, operator.CheckpointObject); err != nil {
		t.Fatalf("the stopped operator left no checkpoint: %v", err)
	}

	// While no operator runs, the canary converges; the next operators
	// resume from the checkpoint.
	e.report("rpi-1", "api", rev, events.WorkloadConverged, "")
	e.startOperator()
	e.startOperator() // and two come back at once
	e.waitFor("release to the rest", func() bool { return e.intentOf("rpi-2", "api") == 1 })
	e.report("rpi-2", "api", rev, events.WorkloadConverged, "")
	e.waitPhase("api", fleetv1.PhaseSucceeded)

	want := []events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanariesConverged,
		events.TypeRolloutReleased, events.TypeRolloutSucceeded}
	if diff := cmp.Diff(want, e.transitions("api")); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
}

func TestDeletionRemovesTheIntentOfEveryTarget(t *testing.T) {
	e := newEnv(t)
	// Device ids are global (subjects and KV keys carry no namespace), and
	// every test shares one API server: use ids no other test uses.
	solo := "solo-" + e.ns
	e.device(solo, map[string]string{"role": "solo"})
	e.startOperator()
	d := e.deployment("api", map[string]string{"role": "solo"})
	e.revisionOf("api", 1)
	e.waitFor("the intent", func() bool { return e.intentOf(solo, "api") == 1 })
	if err := e.c.Delete(e.ctx, d); err != nil {
		t.Fatal(err)
	}
	e.waitFor("the key to go once the device has nothing left to run", func() bool {
		_, err := e.kv.Get(e.ctx, solo)
		return errors.Is(err, jetstream.ErrKeyNotFound)
	})
}

// TestTheRolloutTakesReportsInStreamOrder: a device's later workload report
// decides its result even when its clock puts it ten years earlier, and a
// report from ten years ahead does not hide the reports after it.
func TestTheRolloutTakesReportsInStreamOrder(t *testing.T) {
	e := newEnv(t)
	a, b := "clock-a-"+e.ns, "clock-b-"+e.ns
	e.device(a, map[string]string{"role": "clock"})
	e.device(b, map[string]string{"role": "clock"})
	e.startOperator()
	e.deployment("api", map[string]string{"role": "clock"})
	rev := e.revisionOf("api", 1)
	decade := 10 * 365 * 24 * time.Hour
	reportAt := func(device string, phase events.WorkloadPhase, errText string, since time.Time) {
		t.Helper()
		ev := e.workloadReport(device, "api", rev, phase, errText)
		wd, err := events.Decode[events.WorkloadStatus](ev)
		if err != nil {
			t.Fatal(err)
		}
		wd.Since = since.UTC()
		ev, err = events.New(ev.Keys, wd, events.WithCorrelation(rev.UID, rev.Generation), events.WithTime(since))
		if err != nil {
			t.Fatal(err)
		}
		if err := e.store.Report(e.ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	reportAt(a, events.WorkloadApplying, "", time.Now().Add(decade))
	reportAt(a, events.WorkloadConverged, "", time.Now())
	reportAt(b, events.WorkloadApplying, "", time.Now())
	reportAt(b, events.WorkloadFailed, "exit 3", time.Now().Add(-decade))
	d := e.waitPhase("api", fleetv1.PhaseFailed)
	if d.Status.Counts.Succeeded != 1 || d.Status.Counts.Failed != 1 {
		t.Errorf("counts %+v, want a converged (after its far-future report) and b failed (its later report)", d.Status.Counts)
	}
	if f := d.Status.LatestFailure; f == nil || f.Device != b || f.Error != "exit 3" {
		t.Errorf("latestFailure %+v, want %s's", f, b)
	}
}

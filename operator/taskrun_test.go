package operator_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

const agentSHA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// id is a device id unique on the shared API server (ids are unique across
// namespaces: a namesake in an older test's namespace would own it).
func (e *env) id(name string) string { return e.ns + "-" + name }

// taskRun creates a TaskRun; agent-upgrade TaskRuns carry an artifact.
func (e *env) taskRun(name string, task fleetv1.TaskName, selector map[string]string, groups ...string) *fleetv1.TaskRun {
	e.t.Helper()
	tr := &fleetv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec: fleetv1.TaskRunSpec{Task: task, AllowedGroups: groups, TargetSelector: fleetv1.TargetSelector{MatchLabels: selector}}}
	if task == fleetv1.TaskAgentUpgrade {
		tr.Spec.Agent = &fleetv1.AgentArtifact{URL: "https://downloads.example.com/fleet-agent", SHA256: agentSHA, Version: "v2.0.0"}
		tr.Spec.MaintenanceWindow = &fleetv1.MaintenanceWindow{Start: "02:00", Duration: "2h"}
	}
	if err := e.c.Create(e.ctx, tr); err != nil {
		e.t.Fatal(err)
	}
	return tr
}

func (e *env) getTaskRun(name string) *fleetv1.TaskRun {
	e.t.Helper()
	var tr fleetv1.TaskRun
	if err := e.c.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: name}, &tr); err != nil {
		e.t.Fatal(err)
	}
	return &tr
}

// taskIntent returns every event of a TaskRun's intent subject, in order.
func (e *env) taskIntent(name string) []events.Record {
	e.t.Helper()
	subj, _ := events.TaskRunIntentSubject(e.ns, name)
	var out []events.Record
	for r, err := range e.store.Replay(e.ctx, subj, events.FromStart()) {
		if _, skip := events.AsRecordError(err); skip {
			continue
		}
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// created waits for the TaskRun's taskrun.created event.
func (e *env) created(name string) events.TaskRunCreated {
	e.t.Helper()
	var c events.TaskRunCreated
	e.waitFor("taskrun.created of "+name, func() bool {
		for _, r := range e.taskIntent(name) {
			if d, err := events.Decode[events.TaskRunCreated](r.Event); err == nil {
				c = d
				return true
			}
		}
		return false
	})
	return c
}

// deviceIntent reads a device's fleet-intent value (zero value: no key).
func (e *env) deviceIntent(device string) projections.DeviceIntent {
	e.t.Helper()
	entry, err := e.kv.Get(e.ctx, device)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return projections.DeviceIntent{}
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var v projections.DeviceIntent
	if err := json.Unmarshal(entry.Value(), &v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

// hasTask reports whether the device's value holds the TaskRun's entry.
func (e *env) hasTask(device, taskRun string) bool {
	return slices.ContainsFunc(e.deviceIntent(device).Tasks, func(t events.TaskEntry) bool {
		return t.Namespace == e.ns && t.TaskRun == taskRun
	})
}

// taskReport publishes a device's task status as an agent does.
func (e *env) taskReport(device string, c events.TaskRunCreated, name, phase, errText string, st events.TaskStatus) {
	e.t.Helper()
	st.Namespace, st.TaskRun, st.UID, st.Task, st.Phase, st.Error = e.ns, name, c.UID, c.Task, phase, errText
	if st.Since.IsZero() {
		st.Since = time.Now().UTC()
	}
	ev, err := events.New(events.Keys{Device: device}, st, events.WithCorrelation(c.UID, c.Generation))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.Report(e.ctx, ev); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) waitTaskPhase(name string, phase fleetv1.TaskRunPhase) *fleetv1.TaskRun {
	e.t.Helper()
	var tr *fleetv1.TaskRun
	e.waitFor("TaskRun phase "+string(phase), func() bool {
		tr = e.getTaskRun(name)
		return tr.Status.Phase == phase
	})
	return tr
}

func TestATaskRunFreezesItsTargetsInOneCreationAndWritesTheirIntent(t *testing.T) {
	e := newEnv(t)
	e.device(e.id("rpi-1"), map[string]string{"role": "analyzer"})
	e.device(e.id("rpi-2"), map[string]string{"role": "analyzer"})
	e.device(e.id("rpi-3"), map[string]string{"role": "analyzer", "blacklist": "true"})
	e.device(e.id("rpi-4"), map[string]string{"role": "other"})
	// Two operators race for the creation.
	stopA := e.startOperator()
	e.startOperator()
	tr := e.taskRun("agent", fleetv1.TaskAgentUpgrade, map[string]string{"role": "analyzer"})

	c := e.created("agent")
	want := events.TaskRunCreated{UID: string(tr.UID), Generation: 1, Task: events.TaskAgentUpgrade, Targets: []string{e.id("rpi-1"), e.id("rpi-2")},
		Agent:  &events.AgentArtifact{URL: "https://downloads.example.com/fleet-agent", SHA256: agentSHA, Version: "v2.0.0"},
		Window: &events.MaintenanceWindow{Start: "02:00", Duration: "2h"}}
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("taskrun.created (-want +got):\n%s", diff)
	}
	e.waitFor("the targets' task entries", func() bool { return e.hasTask(e.id("rpi-1"), "agent") && e.hasTask(e.id("rpi-2"), "agent") })
	if got := e.deviceIntent(e.id("rpi-1")).Tasks; !cmp.Equal(got, []events.TaskEntry{{Namespace: e.ns, TaskRun: "agent", UID: c.UID,
		Task: events.TaskAgentUpgrade, Agent: want.Agent, Window: want.Window}}) {
		t.Errorf("rpi-1 tasks %+v", got)
	}
	for _, d := range []string{e.id("rpi-3"), e.id("rpi-4")} {
		if e.hasTask(d, "agent") {
			t.Errorf("%s is no target but has the task", d)
		}
	}
	e.waitFor("TargetsResolved", func() bool {
		c := meta.FindStatusCondition(e.getTaskRun("agent").Status.Conditions, fleetv1.ConditionTargetsResolved)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == fleetv1.ReasonResolved && c.ObservedGeneration == 1
	})

	t.Run("a device labelled later is not a target, across a restart", func(t *testing.T) {
		e.device(e.id("rpi-5"), map[string]string{"role": "analyzer"})
		stopA()
		e.startOperator()
		tr := e.waitTaskPhase("agent", fleetv1.TaskRunPending)
		if tr.Status.Counts.Targets != 2 {
			t.Errorf("counts %+v, want 2 targets", tr.Status.Counts)
		}
		n := 0
		for _, r := range e.taskIntent("agent") {
			if r.Event.Type == events.TypeTaskRunCreated {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d taskrun.created events, want exactly 1", n)
		}
		if e.hasTask(e.id("rpi-5"), "agent") {
			t.Error("a device labelled after the creation got the task")
		}
	})
}

func TestADeploymentAndATaskRunOnOneDeviceBothKeepTheirEntries(t *testing.T) {
	e := newEnv(t)
	e.device(e.id("rpi-1"), map[string]string{"role": "analyzer"})
	e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})
	e.revisionOf("api", 1)
	e.waitFor("the Deployment's entry", func() bool { return e.intentOf(e.id("rpi-1"), "api") == 1 })
	// A TaskRun named like the Deployment: another entry all the same.
	e.taskRun("api", fleetv1.TaskSystemUpgrade, map[string]string{"role": "analyzer"})
	e.waitFor("the task entry", func() bool { return e.hasTask(e.id("rpi-1"), "api") })
	if e.intentOf(e.id("rpi-1"), "api") != 1 {
		t.Fatal("the TaskRun erased the Deployment's entry")
	}

	t.Run("a new Deployment generation keeps the task entry", func(t *testing.T) {
		e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
		e.waitFor("generation 2 on the device", func() bool { return e.intentOf(e.id("rpi-1"), "api") == 2 })
		if !e.hasTask(e.id("rpi-1"), "api") {
			t.Error("the rollout erased the task entry")
		}
	})
	t.Run("deleting the TaskRun appends taskrun.deleted once and removes only its entry", func(t *testing.T) {
		tr := e.getTaskRun("api")
		if !slices.Contains(tr.Finalizers, fleetv1.FinalizerTaskRun) {
			t.Fatalf("finalizers %v", tr.Finalizers)
		}
		if err := e.c.Delete(e.ctx, tr); err != nil {
			t.Fatal(err)
		}
		e.waitFor("the TaskRun to go", func() bool {
			var got fleetv1.TaskRun
			err := e.c.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: "api"}, &got)
			return client.IgnoreNotFound(err) == nil && err != nil
		})
		e.waitFor("the task entry to go", func() bool { return !e.hasTask(e.id("rpi-1"), "api") })
		if e.intentOf(e.id("rpi-1"), "api") != 2 {
			t.Error("deleting the TaskRun erased the Deployment's entry")
		}
		var deleted []events.TaskRunDeleted
		for _, r := range e.taskIntent("api") {
			if d, err := events.Decode[events.TaskRunDeleted](r.Event); err == nil && r.Event.Type == events.TypeTaskRunDeleted {
				deleted = append(deleted, d)
			}
		}
		if !cmp.Equal(deleted, []events.TaskRunDeleted{{UID: string(tr.UID)}}) {
			t.Errorf("taskrun.deleted events %+v, want one of %s", deleted, tr.UID)
		}
	})
}

func TestATaskRunWithoutTargetsIsFailedNeverSucceeded(t *testing.T) {
	tests := []struct {
		name       string
		groups     []string
		wantReason string
	}{
		{"a selector that matches no device says so", nil, fleetv1.ReasonNoMatchingDevices},
		{"allowedGroups without a group source fails closed", []string{"lab"}, fleetv1.ReasonNoGroupSource},
	}
	e := newEnv(t)
	e.device(e.id("rpi-1"), map[string]string{"role": "analyzer"})
	e.startOperator()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("none-%d", i)
			selector := map[string]string{"role": "nothing"}
			if tc.groups != nil {
				selector = map[string]string{"role": "analyzer"}
			}
			e.taskRun(name, fleetv1.TaskSystemUpgrade, selector, tc.groups...)
			if c := e.created(name); len(c.Targets) != 0 {
				t.Fatalf("targets %v, want none", c.Targets)
			}
			tr := e.waitTaskPhase(name, fleetv1.TaskRunFailed)
			if c := meta.FindStatusCondition(tr.Status.Conditions, fleetv1.ConditionReady); c == nil || c.Status != metav1.ConditionFalse ||
				c.Reason != fleetv1.ReasonNoTargets {
				t.Errorf("Ready %+v, want False/%s", c, fleetv1.ReasonNoTargets)
			}
			e.waitFor("TargetsResolved saying why", func() bool {
				c := meta.FindStatusCondition(e.getTaskRun(name).Status.Conditions, fleetv1.ConditionTargetsResolved)
				return c != nil && c.Status == metav1.ConditionFalse && c.Reason == tc.wantReason
			})
		})
	}
}

func TestTaskReportsDriveTheTaskRunStatusAndARestartRebuildsIt(t *testing.T) {
	e := newEnv(t)
	for _, d := range []string{"rpi-1", "rpi-2", "rpi-3"} {
		e.device(e.id(d), map[string]string{"role": "analyzer"})
	}
	e.device(e.id("rpi-9"), map[string]string{"role": "other"})
	e.skips = events.NewSkipCounter()
	stop := e.startOperator()
	e.taskRun("upgrade", fleetv1.TaskSystemUpgrade, map[string]string{"role": "analyzer"})
	c := e.created("upgrade")
	e.waitTaskPhase("upgrade", fleetv1.TaskRunPending)

	e.taskReport(e.id("rpi-1"), c, "upgrade", events.TaskRunning, "", events.TaskStatus{})
	tr := e.waitTaskPhase("upgrade", fleetv1.TaskRunRunning)
	if diff := cmp.Diff(fleetv1.TaskRunCounts{Targets: 3, Pending: 2, Running: 1}, tr.Status.Counts); diff != "" {
		t.Errorf("counts after one Running (-want +got):\n%s", diff)
	}

	// Hostile and stray input: none of it may change the status or stop
	// the fold.
	e.taskReport(e.id("rpi-9"), c, "upgrade", events.TaskFailed, "not a target", events.TaskStatus{})
	other := c
	other.UID = "another-uid"
	e.taskReport(e.id("rpi-2"), other, "upgrade", events.TaskFailed, "another UID", events.TaskStatus{})
	e.publishRaw("fleet.report."+e.id("rpi-3")+".task", []byte("not json"))
	// rpi-9 forges a Failed report in rpi-2's name, on its own subject:
	// the device a report is about is the one its subject names.
	forged, err := events.New(events.Keys{Device: e.id("rpi-2")}, events.TaskStatus{Namespace: e.ns, TaskRun: "upgrade", UID: c.UID,
		Task: c.Task, Phase: events.TaskFailed, Error: "forged", Since: time.Now().UTC()})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := forged.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	e.publishRaw("fleet.report."+e.id("rpi-9")+".task", raw)

	failedAt := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	e.taskReport(e.id("rpi-1"), c, "upgrade", events.TaskSucceeded, "", events.TaskStatus{Changes: []events.PackageChange{
		{Package: "openssl", From: "3.0.1", To: "3.0.2"}, {Package: "curl", From: "8.0", To: "8.1"}}})
	e.taskReport(e.id("rpi-2"), c, "upgrade", events.TaskFailed, "apt-get: dpkg was interrupted", events.TaskStatus{Since: failedAt})
	e.taskReport(e.id("rpi-3"), c, "upgrade", events.TaskSucceeded, "", events.TaskStatus{})
	tr = e.waitTaskPhase("upgrade", fleetv1.TaskRunFailed)

	if diff := cmp.Diff(fleetv1.TaskRunCounts{Targets: 3, Succeeded: 2, Failed: 1}, tr.Status.Counts); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&fleetv1.TaskFailure{Device: e.id("rpi-2"), Message: "apt-get: dpkg was interrupted", Time: metav1.NewTime(failedAt)},
		tr.Status.LatestFailure, cmpopts.EquateApproxTime(0)); diff != "" {
		t.Errorf("latestFailure (-want +got):\n%s", diff)
	}
	results := tr.Status.Results
	wantResults := []fleetv1.TaskDeviceResult{
		{Device: e.id("rpi-1"), Phase: events.TaskSucceeded, ChangedPackages: 2},
		{Device: e.id("rpi-2"), Phase: events.TaskFailed, Message: "apt-get: dpkg was interrupted"},
		{Device: e.id("rpi-3"), Phase: events.TaskSucceeded},
	}
	if diff := cmp.Diff(wantResults, results, cmpopts.IgnoreFields(fleetv1.TaskDeviceResult{}, "Since")); diff != "" {
		t.Errorf("results (-want +got):\n%s", diff)
	}
	if r := meta.FindStatusCondition(tr.Status.Conditions, fleetv1.ConditionReady); r == nil || r.Status != metav1.ConditionFalse ||
		r.Reason != fleetv1.ReasonTaskFailed || r.ObservedGeneration != 1 {
		t.Errorf("Ready %+v", r)
	}
	if tr.Status.ObservedGeneration != 1 {
		t.Errorf("observedGeneration %d", tr.Status.ObservedGeneration)
	}
	if n := e.skips.Skipped(events.StreamReports, events.ReasonNotAnEnvelope); n == 0 {
		t.Error("the undecodable report was not counted")
	}
	if n := e.skips.Skipped(events.StreamReports, events.ReasonSubjectMismatch); n == 0 {
		t.Error("the forged report was not counted")
	}

	t.Run("an operator restart rebuilds the same status from the streams, a late report after a result changing nothing", func(t *testing.T) {
		e.taskReport(e.id("rpi-2"), c, "upgrade", events.TaskSucceeded, "", events.TaskStatus{}) // the rebuild folds it
		stop()
		before := e.getTaskRun("upgrade").Status
		// Wipe what the runner owns, as another writer could.
		wiped := e.getTaskRun("upgrade")
		wiped.Status.Phase, wiped.Status.Counts, wiped.Status.Results, wiped.Status.LatestFailure = "", fleetv1.TaskRunCounts{}, nil, nil
		if err := e.c.Status().Update(e.ctx, wiped); err != nil {
			t.Fatal(err)
		}
		e.startOperator()
		e.waitTaskPhase("upgrade", fleetv1.TaskRunFailed)
		var after fleetv1.TaskRunStatus
		e.waitFor("the whole status rebuilt", func() bool {
			after = e.getTaskRun("upgrade").Status
			return cmp.Equal(before, after)
		})
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("rebuilt status (-before +after):\n%s", diff)
		}
		if after.Counts.Failed != 1 || after.LatestFailure == nil || after.LatestFailure.Device != e.id("rpi-2") {
			t.Errorf("the late report changed the result: %+v", after)
		}
	})
}

func TestAllTargetsSucceededMakesTheTaskRunSucceededAndReady(t *testing.T) {
	e := newEnv(t)
	e.device(e.id("rpi-1"), map[string]string{"role": "analyzer"})
	e.startOperator()
	e.taskRun("agent", fleetv1.TaskAgentUpgrade, map[string]string{"role": "analyzer"})
	c := e.created("agent")
	e.taskReport(e.id("rpi-1"), c, "agent", events.TaskRunning, "", events.TaskStatus{})
	e.taskReport(e.id("rpi-1"), c, "agent", events.TaskSucceeded, "", events.TaskStatus{AgentVersion: "v2.0.0"})
	tr := e.waitTaskPhase("agent", fleetv1.TaskRunSucceeded)
	if r := meta.FindStatusCondition(tr.Status.Conditions, fleetv1.ConditionReady); r == nil || r.Status != metav1.ConditionTrue ||
		r.Reason != fleetv1.ReasonTaskSucceeded {
		t.Errorf("Ready %+v", r)
	}
	if len(tr.Status.Results) != 1 || tr.Status.Results[0].AgentVersion != "v2.0.0" || tr.Status.LatestFailure != nil {
		t.Errorf("status %+v", tr.Status)
	}
}

package fleetview

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// mockDegraded is how many converged targets of the mock's first
// Deployment crash-loop after its rollout succeeded.
const mockDegraded = 2

// degrade marks the first mockDegraded converged targets of d's current
// revision Degraded (a crash loop after the switch): health entries in its
// timeline, the Degraded states, and the Degraded condition the operator
// would write. Every other Deployment gets the condition False.
func (m *mockFleet) degrade(d *fleetv1.Deployment, tl *history.DeploymentTimeline, n int) {
	cur := tl.Revisions[len(tl.Revisions)-1]
	var names []string
	for _, res := range cur.Results {
		if len(names) == n {
			break
		}
		if res.Phase != events.WorkloadConverged {
			continue
		}
		since := res.Since.Add(7 * time.Minute)
		h := events.WorkloadHealth{Namespace: d.Namespace, Deployment: d.Name, UID: cur.UID, Generation: cur.Generation, RevisionID: cur.RevisionID,
			Reason: events.HealthCrashLoop, Window: 300, Since: since, Services: []events.ServiceHealth{{Name: d.Name, State: "exited", Restarts: 3,
				RestartsTotal: 14, ExitCode: 2, Logs: []string{"loading configuration", "fatal: TELEMETRY_ENDPOINT is not set"}}}}
		summary := fmt.Sprintf("%s degraded: %s CrashLoop, exit 2, exited, 3 restarts in 5m, last output %q", res.Device, d.Name, h.Services[0].Logs[1])
		data, _ := json.Marshal(h)
		id := mockID("health", res.Device, cur.Generation)
		tl.Entries = append(tl.Entries, history.Entry{Time: since, EventTime: since, ID: id, Type: events.TypeWorkloadDegraded,
			Stream: events.StreamReports, Device: res.Device, Deployment: d.Namespace + "/" + d.Name, Generation: cur.Generation,
			RevisionID: cur.RevisionID, Summary: summary, Stage: tl.State.Stage, Data: data})
		tl.Degraded = append(tl.Degraded, history.HealthState{Device: res.Device, Deployment: d.Namespace + "/" + d.Name, UID: cur.UID,
			Generation: cur.Generation, RevisionID: cur.RevisionID, Reason: events.HealthCrashLoop, Summary: summary, Since: since, ID: id})
		if m.degraded[res.Device] == nil {
			m.degraded[res.Device] = map[string]string{}
		}
		m.degraded[res.Device][d.Namespace+"/"+d.Name] = events.HealthCrashLoop
		names = append(names, res.Device)
	}
	slices.SortStableFunc(tl.Entries, func(a, b history.Entry) int { return a.Time.Compare(b.Time) })
	c := metav1.Condition{Type: fleetv1.ConditionDegraded, Status: metav1.ConditionFalse, ObservedGeneration: d.Status.ObservedGeneration,
		Reason: fleetv1.ReasonNoDegradedDevices, Message: "no device reports a service degraded", LastTransitionTime: d.CreationTimestamp}
	if len(names) > 0 {
		c.Status, c.Reason, c.LastTransitionTime = metav1.ConditionTrue, fleetv1.ReasonServicesDegraded, metav1.NewTime(tl.Degraded[0].Since)
		c.Message = fmt.Sprintf("%d of %d devices degraded: ", len(names), len(cur.Targets))
		for i, s := range tl.Degraded {
			if i > 0 {
				c.Message += ", "
			}
			msg := fmt.Sprintf("%s: CrashLoop, exited with code 2, 3 restarts in 5m0s", d.Name)
			c.Message += fmt.Sprintf("%s (%s)", s.Device, msg)
			d.Status.Degraded = append(d.Status.Degraded, fleetv1.DegradedDevice{Device: s.Device, Revision: s.RevisionID, Reason: s.Reason,
				Message: msg, Since: metav1.NewTime(s.Since)})
		}
		d.Status.Counts.Degraded = int32(len(names))
	}
	d.Status.Conditions = append(d.Status.Conditions, c)
}

// containersOf is a device's container report: one service per
// Deployment it reported, crash-looping where it is degraded.
func (m *mockFleet) containersOf(device string) *history.ContainersSnapshot {
	reps := m.results[device]
	if len(reps) == 0 {
		return nil
	}
	s := &history.ContainersSnapshot{ID: mockID("containers", device, 0), Workloads: []events.WorkloadContainers{}}
	for _, r := range reps {
		started := r.Since
		c := events.ContainerState{Name: r.Deployment, Role: events.ContainerRoleService, State: "running", StartedAt: &started,
			ImageDigest: "sha256:" + mockID("digest", r.Deployment, r.Generation)}
		w := events.WorkloadContainers{Namespace: r.Namespace, Deployment: r.Deployment, UID: r.UID, Generation: r.Generation, RevisionID: r.RevisionID,
			Degraded: m.degraded[device][r.Namespace+"/"+r.Deployment]}
		switch {
		case w.Degraded != "":
			exited := r.Since.Add(7 * time.Minute)
			c.State, c.Restarts, c.ExitCode, c.ExitedAt = "exited", 14, 2, &exited
		case r.Phase == events.WorkloadFailed:
			c.State, c.ExitCode = "created", 0
		}
		w.Containers = []events.ContainerState{c}
		s.Workloads = append(s.Workloads, w)
		if r.Stored.After(s.Stored) {
			s.Stored = r.Stored.Add(time.Minute)
		}
	}
	slices.SortFunc(s.Workloads, func(a, b events.WorkloadContainers) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Deployment, b.Deployment))
	})
	return s
}

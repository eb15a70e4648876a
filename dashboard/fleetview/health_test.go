package fleetview

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

func TestADeploymentPageNamesItsDegradedDevices(t *testing.T) {
	since := testNow.Add(-2 * time.Minute)
	timeline := func() *history.DeploymentTimeline {
		return &history.DeploymentTimeline{Namespace: "apps", Name: "api", State: &history.RolloutState{UID: "u7", Generation: 2},
			Degraded: []history.HealthState{
				{Device: "podman-1", Deployment: "apps/api", UID: "u7", Generation: 2, Reason: events.HealthCrashLoop, Since: since,
					Summary: "podman-1 degraded: api CrashLoop, exit 2, 3 restarts in 5m, last output \"boom\x1b[2J\""},
				{Device: "edge-7", Deployment: "apps/api", UID: "u7", Generation: 2, Reason: events.HealthOOMKilled, Since: since.Add(time.Minute),
					Summary: "edge-7 degraded: api OOMKilled"},
				{Device: "old-1", Deployment: "apps/api", UID: "u7", Generation: 1, Reason: events.HealthDown, Summary: "old-1 degraded: api Down"},
			}}
	}
	names := func(g *Degraded) string {
		if g == nil {
			return "not degraded"
		}
		var out []string
		for _, d := range g.Devices {
			out = append(out, d.Device+" "+d.Reason)
		}
		return fmt.Sprintf("%d: %s", g.Count, strings.Join(out, ", "))
	}
	for _, tc := range []struct {
		name string
		dep  *fleetv1.Deployment // nil: deleted, only in the streams
		want string
	}{
		{"a Degraded condition is completed with the devices of the current revision, sorted",
			ptr(degradedDeployment("api", 2, 2, metav1.ConditionTrue, since)), "2: edge-7 OOMKilled, podman-1 CrashLoop"},
		{"the devices status.degraded lists are shown rather than the reports'",
			ptr(listedDeployment(since)), "3: podman-9 Down"},
		{"a status that says not degraded is believed over the reports",
			ptr(degradedDeployment("api", 2, 2, metav1.ConditionFalse, since)), "not degraded"},
		{"without the condition (an older operator) the reports decide",
			ptr(failingDeployment("api", "u7", 2, 0, fleetv1.PhaseSucceeded)), "2: edge-7 OOMKilled, podman-1 CrashLoop"},
		{"a deleted Deployment's page shows what the reports said", nil, "2: edge-7 OOMKilled, podman-1 CrashLoop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dd := DeploymentDetail{}
			crSays := false
			if tc.dep != nil {
				dd.DeploymentSummary = deploymentSummary(tc.dep)
				crSays = hasCondition(tc.dep.Status.Conditions, fleetv1.ConditionDegraded)
			}
			tl := timeline()
			fillDeploymentHistory(&dd, tl, tc.dep != nil)
			timelineHealth(&dd, tl, crSays)
			if got := names(dd.Degraded); got != tc.want {
				t.Errorf("degraded %q, want %q", got, tc.want)
			}
			if g := dd.Degraded; g != nil {
				for _, d := range g.Devices {
					if strings.Contains(d.Message, "\x1b") || strings.HasPrefix(d.Message, d.Device) {
						t.Errorf("message %q: want the summary without the device, cleaned", d.Message)
					}
				}
				if tc.dep == nil && !g.Since.Equal(since) {
					t.Errorf("since %s, want the first report's %s", g.Since, since)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// listedDeployment is degradedDeployment with status.degraded listing one
// device of the three status.counts.degraded counts.
func listedDeployment(since time.Time) fleetv1.Deployment {
	d := degradedDeployment("api", 2, 2, metav1.ConditionTrue, since)
	d.Status.Counts.Degraded = 3
	d.Status.Degraded = []fleetv1.DegradedDevice{{Device: "podman-9", Revision: "r", Reason: events.HealthDown, Message: "api: Down\x1b[2J",
		Since: metav1.NewTime(since)}}
	return d
}

func TestTheContainersTableIsBoundedAndCleaned(t *testing.T) {
	started := testNow.Add(-time.Hour)
	hostile := "api\u202egnp.exe\x1b[31m" + strings.Repeat("x", 4096)
	snap := &history.ContainersSnapshot{Stored: testNow, Workloads: []events.WorkloadContainers{
		{Namespace: "apps", Deployment: "web", Generation: 3, Containers: []events.ContainerState{{Name: "web", Role: "service", State: "running", StartedAt: &started}}},
		{Namespace: "a.b", Deployment: "*", Containers: []events.ContainerState{{Name: "forged"}}},
		{Namespace: "apps", Deployment: "api", Generation: 2, Degraded: events.HealthCrashLoop, Containers: []events.ContainerState{
			{Name: "init", Role: "init", State: "exited"}, {Name: hostile, Role: "service", State: "exited", Restarts: 12, ExitCode: 2, ImageDigest: hostile}}},
	}}
	for range MaxContainersShown + 1 {
		snap.Workloads[0].Containers = append(snap.Workloads[0].Containers, events.ContainerState{Name: "extra", State: "running"})
	}
	got, truncated := deviceWorkloads(snap)
	var rows []string
	for _, w := range got {
		rows = append(rows, fmt.Sprintf("%s/%s %d %s", w.Namespace, w.Name, len(w.Containers), w.Degraded))
	}
	if diff := cmp.Diff([]string{"apps/api 2 CrashLoop", fmt.Sprintf("apps/web %d ", MaxContainersShown)}, rows); diff != "" {
		t.Errorf("workloads (-want +got):\n%s", diff)
	}
	if !truncated {
		t.Error("a Deployment with more containers than shown is not marked truncated")
	}
	c := got[0].Containers[1]
	if len(c.Name) > MaxFieldLength+len("…") || strings.ContainsAny(c.Name+c.ImageDigest, "\u202e\x1b") || c.Restarts != 12 || c.ExitCode != 2 {
		t.Errorf("container %+v: want bounded, escaped text and the counts", c)
	}
	if !got[1].Containers[0].StartedAt.Equal(started) {
		t.Errorf("started %s", got[1].Containers[0].StartedAt)
	}
}

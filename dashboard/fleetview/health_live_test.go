package fleetview_test

import (
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/score"
)

// TestALiveDegradedDeploymentIsShownAndAlerted: on a real operator, a
// Deployment that succeeded on two devices, one of which then reports a
// crash loop and its containers, is shown Succeeded and Degraded on its
// page (naming the device and what it reported), alerted, and the device's
// page shows its containers; the device's recovery ends it all.
func TestALiveDegradedDeploymentIsShownAndAlerted(t *testing.T) {
	f := newFleet(t, "view-degraded", true)
	v := f.liveView(nil)
	for _, d := range []string{"podman-1", "podman-2"} {
		f.device(d, map[string]string{"role": "crash"})
	}
	var beats atomic.Int64
	f.heartbeats(&beats, "podman-1", "podman-2")
	dep := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "api", Namespace: f.ns},
		Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "crash"}},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: "localhost/fleet-examples/analysis-api:v1"}}}}}}
	if err := f.c.Create(f.ctx, dep); err != nil {
		t.Fatal(err)
	}
	rev := f.revision("api", 1)
	f.workload("podman-1", rev, "api", events.WorkloadConverged, "")
	f.workload("podman-2", rev, "api", events.WorkloadConverged, "")
	testenv.Eventually(t, "the rollout succeeds", wait, func() bool {
		d, err := v.Deployment(f.ctx, f.ns, "api")
		return err == nil && d.Phase == string(fleetv1.PhaseSucceeded)
	})

	health := func(typ events.Type, reason string, svc events.ServiceHealth) {
		t.Helper()
		ev, err := events.New(events.Keys{Device: "podman-1"}, events.NewWorkloadHealth(typ, events.WorkloadHealth{Namespace: f.ns, Deployment: "api",
			UID: rev.UID, Generation: rev.Generation, RevisionID: rev.RevisionID, Reason: reason, Window: 300, Since: time.Now().UTC(),
			Services: []events.ServiceHealth{svc}}), events.WithCorrelation(rev.UID, rev.Generation))
		if err != nil {
			t.Fatal(err)
		}
		natstest.Report(t, f.ctx, f.store, ev)
	}
	health(events.TypeWorkloadDegraded, events.HealthCrashLoop, events.ServiceHealth{Name: "api", State: "exited", Restarts: 3, ExitCode: 2,
		Logs: []string{"fatal: TOKEN is not set"}})
	f.report("podman-1", events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: f.ns, Deployment: "api", UID: rev.UID,
		Generation: rev.Generation, RevisionID: rev.RevisionID, Degraded: events.HealthCrashLoop, Containers: []events.ContainerState{
			{Name: "api", Role: events.ContainerRoleService, State: "exited", Restarts: 3, ExitCode: 2, ImageDigest: "sha256:abc123"}}}}})

	var d fleetview.DeploymentDetail
	testenv.Eventually(t, "the Deployment page shows it Degraded", wait, func() bool {
		var err error
		d, err = v.Deployment(f.ctx, f.ns, "api")
		// The condition is the cache's, the timeline the streams': each
		// comes on its own time.
		inTimeline := slices.ContainsFunc(d.Timeline, func(e fleetview.TimelineEntry) bool {
			return e.Type == events.TypeWorkloadDegraded && strings.Contains(e.Summary, `podman-1 degraded: api CrashLoop, exit 2`)
		})
		return err == nil && d.Degraded != nil && len(d.Degraded.Devices) == 1 && inTimeline
	})
	if g := d.Degraded; d.Phase != string(fleetv1.PhaseSucceeded) || g.Count != 1 || g.Devices[0].Device != "podman-1" ||
		g.Devices[0].Reason != events.HealthCrashLoop || !strings.Contains(g.Message, "podman-1") || g.Since.IsZero() {
		t.Errorf("phase %s, degraded %+v: want Succeeded, podman-1 CrashLoop", d.Phase, g)
	}
	found := false
	for _, e := range d.Timeline {
		found = found || (e.Type == events.TypeWorkloadDegraded && strings.Contains(e.Summary, `podman-1 degraded: api CrashLoop, exit 2`))
	}
	if !found {
		t.Errorf("the timeline lacks podman-1's Degraded report: %+v", d.Timeline)
	}
	alerted := func() bool {
		as, err := v.Alerts(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range as {
			if a.Kind == fleetview.AlertDeploymentDegraded && a.Page.Key == f.ns+"/api" {
				return true
			}
		}
		return false
	}
	if !alerted() {
		t.Errorf("no deployment-degraded alert for %s/api", f.ns)
	}
	dev, err := v.Device(f.ctx, "podman-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(dev.Workloads) != 1 || dev.Workloads[0].Degraded != events.HealthCrashLoop || len(dev.Workloads[0].Containers) != 1 ||
		dev.Workloads[0].Containers[0].Restarts != 3 || dev.WorkloadsAt.IsZero() {
		t.Errorf("podman-1's containers %+v at %s", dev.Workloads, dev.WorkloadsAt)
	}

	health(events.TypeWorkloadRecovered, events.HealthStable, events.ServiceHealth{Name: "api", State: "running"})
	testenv.Eventually(t, "the recovery ends the Degraded banner and the alert", wait, func() bool {
		d, err := v.Deployment(f.ctx, f.ns, "api")
		return err == nil && d.Degraded == nil && !alerted()
	})
}

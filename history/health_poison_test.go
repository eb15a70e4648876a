package history_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// TestHealthAndContainerPoisonIsSkippedAndCounted stores every poison
// variant of a health report and of a container report, a health report
// with hostile text and a huge output in every string, and expects every
// timeline to skip and count the poison, go on, and bound and keep the
// hostile text for the renderers to escape.
func TestHealthAndContainerPoisonIsSkippedAndCounted(t *testing.T) {
	f := startFleet(t)
	api := f.revision("api", "a9f1-uid", 1, []string{"edge-1", "edge-2"}, nil)
	f.report("edge-1", "api", api, events.WorkloadConverged, "", time.Now())
	f.report("edge-2", "api", api, events.WorkloadConverged, "", time.Now())
	f.waitPhase("api", 1, fleetv1.PhaseSucceeded)

	nHealth, _ := f.poison(mustEvent(t, events.Keys{Device: "edge-2"}, events.NewWorkloadHealth(events.TypeWorkloadDegraded,
		events.WorkloadHealth{Namespace: "lab", Deployment: "api", UID: api.UID, Generation: 1, Reason: events.HealthCrashLoop})))
	f.poison(mustEvent(t, events.Keys{Device: "edge-2"}, events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: "lab", Deployment: "api"}}}))
	huge := poisontest.Hidden + strings.Repeat("x", 512)
	hostile := events.ServiceHealth{Name: huge, State: huge, Restarts: 3, ExitCode: 2, Signal: huge, Health: huge, Logs: []string{huge, huge}}
	f.health("edge-2", api, events.TypeWorkloadDegraded, huge, 300, hostile, hostile, hostile, hostile, hostile, hostile, hostile, hostile, hostile, hostile)
	f.append(events.Keys{Device: "edge-2"}, events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: "lab", Deployment: "api",
		UID: api.UID, Generation: 1, Degraded: huge, Containers: []events.ContainerState{{Name: huge, Role: huge, State: huge, ImageDigest: huge}}}}})

	h := func() (*history.History, *events.SkipCounter) {
		skips := events.NewSkipCounter()
		h, err := history.New(history.Options{Reader: f.store, Skips: skips})
		if err != nil {
			t.Fatal(err)
		}
		return h, skips
	}
	bounded := func(t *testing.T, what, s string) {
		t.Helper()
		if len(s) > 8<<10 || strings.Contains(s, "\u202e") || strings.Contains(s, "\x1b") {
			t.Errorf("%s is %d bytes or holds a hidden character raw: %.200q", what, len(s), s)
		}
	}

	t.Run("the Deployment's timeline skips and counts every poison health report and bounds the hostile one", func(t *testing.T) {
		hist, skips := h()
		tl, err := hist.Deployment(f.ctx, "lab", "api")
		if err != nil {
			t.Fatal(err)
		}
		if n := skips.Skipped(events.StreamReports, ""); n != uint64(nHealth) {
			t.Errorf("%d reports skipped, want the %d poison health reports", n, nHealth)
		}
		got := healthEntries(tl.Entries)
		if len(got) != 1 || len(tl.Degraded) != 1 {
			t.Fatalf("health entries %d, degraded %d: want the hostile report alone", len(got), len(tl.Degraded))
		}
		bounded(t, "the summary", got[0])
		bounded(t, "the Degraded state's reason", tl.Degraded[0].Reason)
		if len(tl.Degraded[0].Summary) > 1100 {
			t.Errorf("the summary is %d bytes", len(tl.Degraded[0].Summary))
		}
	})

	t.Run("the device's timeline skips and counts every poison report and keeps the last good containers", func(t *testing.T) {
		hist, skips := h()
		tl, err := hist.Device(f.ctx, "edge-2")
		if err != nil {
			t.Fatal(err)
		}
		// The telemetry stream keeps the last 5 per subject: the good
		// report and the last 4 poison ones.
		if r, tm := skips.Skipped(events.StreamReports, ""), skips.Skipped(events.StreamTelemetry, ""); r != uint64(nHealth) || tm != 4 {
			t.Errorf("skipped %d reports and %d telemetry records, want %d and 4", r, tm, nHealth)
		}
		c := tl.Containers
		if c == nil || len(c.Workloads) != 1 || len(c.Workloads[0].Containers) != 1 {
			t.Fatalf("containers %+v", c)
		}
		ct := c.Workloads[0].Containers[0]
		for what, s := range map[string]string{"name": ct.Name, "role": ct.Role, "state": ct.State, "digest": ct.ImageDigest, "degraded": c.Workloads[0].Degraded} {
			bounded(t, "the container's "+what, s)
		}
		if len(tl.Degraded) != 1 {
			t.Errorf("degraded %d, want the hostile report", len(tl.Degraded))
		}
	})

	t.Run("the fleet at a time is folded past every poison health report", func(t *testing.T) {
		hist, skips := h()
		fs, err := hist.FleetAt(f.ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if fs.DegradedDevices != 1 || skips.Skipped(events.StreamReports, "") != uint64(nHealth) {
			t.Errorf("%d degraded devices, %d skipped; want 1 and %d", fs.DegradedDevices, skips.Skipped(events.StreamReports, ""), nHealth)
		}
	})
}

package history_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// health stores a device's health report of rev as its agent does, and
// returns the event.
func (f *fleetRun) health(device string, rev events.DeploymentRevisionCreated, t events.Type, reason string, window int, svcs ...events.ServiceHealth) events.Event {
	f.t.Helper()
	d := events.NewWorkloadHealth(t, events.WorkloadHealth{Namespace: "lab", Deployment: "api", UID: rev.UID, Generation: rev.Generation,
		RevisionID: rev.RevisionID, Reason: reason, Window: window, Services: svcs, Since: time.Now().UTC()})
	return f.append(events.Keys{Device: device}, d, events.WithCorrelation(rev.UID, rev.Generation))
}

// healthEntries returns the summaries (with the ignored reason) of the
// health entries of a timeline.
func healthEntries(entries []history.Entry) []string {
	var out []string
	for _, e := range entries {
		switch e.Type {
		case events.TypeWorkloadDegraded, events.TypeWorkloadRecovered, history.EntryHealthCleared:
			s := string(e.Type) + ": " + e.Summary
			if e.Ignored != "" {
				s += " (ignored: " + e.Ignored + ")"
			}
			out = append(out, s)
		}
	}
	return out
}

func degradedDevices(states []history.HealthState) []string {
	out := []string{}
	for _, s := range states {
		out = append(out, s.Device+" "+s.Deployment+" "+s.Reason)
	}
	return out
}

// TestDegradedAndRecoveredAreOnTheDeploymentAndDeviceTimelines drives a
// Deployment that succeeded through a crash loop that recovers, a re-sent
// copy of a report after a reconnect, an OOM kill that a new revision
// supersedes and a report from a device outside the revision, and expects
// each timeline, the Degraded lists and the fleet at a time to tell it.
func TestDegradedAndRecoveredAreOnTheDeploymentAndDeviceTimelines(t *testing.T) {
	f := startFleet(t)
	api1 := f.revision("api", "a9f1-uid", 1, []string{"edge-1", "edge-2"}, nil)
	f.report("edge-1", "api", api1, events.WorkloadConverged, "", time.Now())
	f.report("edge-2", "api", api1, events.WorkloadConverged, "", time.Now())
	f.waitPhase("api", 1, fleetv1.PhaseSucceeded)

	crash := events.ServiceHealth{Name: "api", State: "exited", Restarts: 3, RestartsTotal: 12, ExitCode: 2,
		Logs: []string{"starting", "FLEET_TOKEN=*** missing"}}
	degraded := f.health("edge-1", api1, events.TypeWorkloadDegraded, events.HealthCrashLoop, 300, crash)
	// The agent reconnected after the server's duplicate window: the same
	// message again, stored a second time.
	payload, err := degraded.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	f.storeRaw(&nats.Msg{Subject: "fleet.report.edge-1.health", Data: payload})
	started := time.Date(2026, 12, 5, 2, 0, 0, 0, time.UTC)
	f.append(events.Keys{Device: "edge-1"}, events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: "lab", Deployment: "api",
		UID: api1.UID, Generation: 1, RevisionID: api1.RevisionID, Degraded: events.HealthCrashLoop, Containers: []events.ContainerState{
			{Name: "api", Role: events.ContainerRoleService, State: "exited", Restarts: 12, ExitCode: 2, StartedAt: &started, ImageDigest: "sha256:0123abcd"}}}}})
	degradedAt := time.Now()
	f.health("edge-1", api1, events.TypeWorkloadRecovered, events.HealthStable, 300, events.ServiceHealth{Name: "api", State: "running"})
	f.health("edge-2", api1, events.TypeWorkloadDegraded, events.HealthOOMKilled, 300,
		events.ServiceHealth{Name: "api", State: "exited", Restarts: 1, ExitCode: 137, Signal: "SIGKILL", OOMKilled: true})
	f.health("edge-3", api1, events.TypeWorkloadDegraded, events.HealthDown, 300, events.ServiceHealth{Name: "api", State: "exited", ExitCode: 1})
	beforeRev2 := time.Now()
	h, err := history.New(history.Options{Reader: f.store})
	if err != nil {
		t.Fatal(err)
	}
	before, err := h.Deployment(f.ctx, "lab", "api")
	if err != nil {
		t.Fatal(err)
	}
	api2 := f.revision("api", "a9f1-uid", 2, []string{"edge-1", "edge-2"}, nil)
	f.waitPhase("api", 2, fleetv1.PhaseProgressing)

	t.Run("the Deployment's timeline shows each report, the re-sent copy and the revision that clears a Degraded device", func(t *testing.T) {
		tl, err := h.Deployment(f.ctx, "lab", "api")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			`device.workload.degraded: edge-1 degraded: api CrashLoop, exit 2, exited, 3 restarts in 5m, last output "FLEET_TOKEN=*** missing"`,
			`device.workload.degraded: edge-1 degraded: api CrashLoop, exit 2, exited, 3 restarts in 5m, last output "FLEET_TOKEN=*** missing" (re-sent)`,
			`device.workload.recovered: edge-1 recovered (stable 5m)`,
			`device.workload.degraded: edge-2 degraded: api OOMKilled, killed by SIGKILL, OOM-killed, exited, 1 restarts in 5m`,
			`device.workload.degraded: edge-3 degraded: api Down, exit 1, exited, 0 restarts in 5m (ignored: device is not a frozen target of this revision)`,
			`history.degraded-cleared: edge-2 degraded (OOMKilled, generation 1) cleared by revision ` + api2.RevisionID + ` (generation 2)`,
		}
		if diff := cmp.Diff(want, healthEntries(tl.Entries)); diff != "" {
			t.Errorf("health entries (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"edge-2 lab/api OOMKilled"}, degradedDevices(before.Degraded)); diff != "" {
			t.Errorf("degraded before revision 2 (-want +got):\n%s", diff)
		}
		if len(tl.Degraded) != 0 {
			t.Errorf("degraded after revision 2: %v; a new revision clears them", degradedDevices(tl.Degraded))
		}
		if tl.State == nil || tl.State.Generation != 2 {
			t.Errorf("state %+v: health reports changed the rollout", tl.State)
		}
		var text bytes.Buffer
		if err := history.Write(&text, before, history.FormatText); err != nil {
			t.Fatal(err)
		}
		if !containsAll(text.String(), "DEGRADED NOW", "edge-2  ", "OOMKilled", "(re-sent)", "recovered (stable 5m)") {
			t.Errorf("text:\n%s", text.String())
		}
	})

	t.Run("a device's timeline shows its reports, its Degraded Deployments and its last containers", func(t *testing.T) {
		tl, err := h.Device(f.ctx, "edge-1")
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			`device.workload.degraded: lab/api generation 1 degraded: api CrashLoop, exit 2, exited, 3 restarts in 5m, last output "FLEET_TOKEN=*** missing"`,
			`device.workload.degraded: lab/api generation 1 degraded: api CrashLoop, exit 2, exited, 3 restarts in 5m, last output "FLEET_TOKEN=*** missing" (re-sent)`,
			`device.workload.recovered: lab/api generation 1 recovered (stable 5m)`,
		}
		if diff := cmp.Diff(want, healthEntries(tl.Entries)); diff != "" {
			t.Errorf("health entries (-want +got):\n%s", diff)
		}
		if len(tl.Degraded) != 0 {
			t.Errorf("degraded %v after its recovery", degradedDevices(tl.Degraded))
		}
		c := tl.Containers
		if c == nil || len(c.Workloads) != 1 || len(c.Workloads[0].Containers) != 1 || c.Workloads[0].Containers[0].Restarts != 12 ||
			c.Workloads[0].Degraded != events.HealthCrashLoop {
			t.Fatalf("containers %+v", c)
		}
		var text bytes.Buffer
		if err := history.Write(&text, tl, history.FormatText); err != nil {
			t.Fatal(err)
		}
		if !containsAll(text.String(), "CONTAINERS (as the device reported them at", "lab/api", "sha256:0123abcd", "code 2", "CrashLoop") {
			t.Errorf("text:\n%s", text.String())
		}

		tl2, err := h.Device(f.ctx, "edge-2")
		if err != nil {
			t.Fatal(err)
		}
		got := healthEntries(tl2.Entries)
		if len(got) != 2 || !strings.HasPrefix(got[1], "history.degraded-cleared: edge-2 degraded (OOMKilled, generation 1) cleared by revision "+api2.RevisionID) {
			t.Errorf("edge-2's health entries %q", got)
		}
		if len(tl2.Degraded) != 0 || tl2.Containers != nil {
			t.Errorf("edge-2: degraded %v, containers %+v", degradedDevices(tl2.Degraded), tl2.Containers)
		}
	})

	t.Run("the fleet at a time counts the devices Degraded then", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			at   time.Time
			want []string
		}{
			{"while edge-1 crash-loops", degradedAt, []string{"edge-1 lab/api CrashLoop"}},
			{"once edge-1 recovered and edge-2 was OOM-killed", beforeRev2, []string{"edge-2 lab/api OOMKilled"}},
			{"after the new revision", time.Now(), []string{}},
		} {
			fs, err := h.FleetAt(f.ctx, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, d := range fs.Devices {
				got = append(got, degradedDevices(d.Degraded)...)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" || fs.DegradedDevices != len(tc.want) {
				t.Errorf("%s: %d degraded devices, degraded (-want +got):\n%s", tc.name, fs.DegradedDevices, diff)
			}
		}
	})
}

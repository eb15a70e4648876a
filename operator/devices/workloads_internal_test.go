package devices

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// report builds a containers report of one Deployment per entry of
// restarts (namespace lab, revision rev), each with one service api of that
// restart count.
func containersReport(rev string, restarts map[string]int) events.DeviceContainers {
	var c events.DeviceContainers
	for name, n := range restarts {
		c.Workloads = append(c.Workloads, events.WorkloadContainers{Namespace: "lab", Deployment: name, UID: "uid-" + name, RevisionID: rev,
			Containers: []events.ContainerState{{Name: "api", Role: events.ContainerRoleService, State: "running", Restarts: n}}})
	}
	return c
}

func TestRestartDeltas(t *testing.T) {
	tests := []struct {
		name      string
		prev, cur events.DeviceContainers
		first     bool
		want      map[string]int64
	}{
		{"the first report seen of a device is its baseline and counts nothing",
			events.DeviceContainers{}, containersReport("r1", map[string]int{"api": 7}), true, nil},
		{"a container of the same revision counts the growth of its count",
			containersReport("r1", map[string]int{"api": 2}), containersReport("r1", map[string]int{"api": 5}), false, map[string]int64{"api": 3}},
		{"an unchanged count counts nothing",
			containersReport("r1", map[string]int{"api": 5}), containersReport("r1", map[string]int{"api": 5}), false, nil},
		{"a count that went down is a replaced container: its whole count",
			containersReport("r1", map[string]int{"api": 5}), containersReport("r1", map[string]int{"api": 2}), false, map[string]int64{"api": 2}},
		{"a container of another revision is a new container: its whole count",
			containersReport("r1", map[string]int{"api": 5}), containersReport("r2", map[string]int{"api": 1}), false, map[string]int64{"api": 1}},
		{"a Deployment new on the device counts its whole count",
			containersReport("r1", map[string]int{"api": 1}), containersReport("r1", map[string]int{"api": 1, "web": 4}), false, map[string]int64{"web": 4}},
		{"Deployments are counted each for itself",
			containersReport("r1", map[string]int{"api": 1, "web": 1}), containersReport("r1", map[string]int{"api": 3, "web": 2}), false,
			map[string]int64{"api": 2, "web": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]int64{}
			for _, d := range restartDeltas(boundContainers(tc.prev), boundContainers(tc.cur), tc.first) {
				if d.ns != "lab" || d.uid != "uid-"+d.name {
					t.Errorf("delta %+v: want namespace lab and the report's UID", d)
				}
				got[d.name] += d.n
			}
			if len(got) == 0 {
				got = nil
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("restarts by Deployment (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWorkloadsDueAtMostOncePerInterval(t *testing.T) {
	// A device whose containers change every second for ten minutes: the
	// controller decides at each report.
	start := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	var last time.Time
	writes := 0
	for s := range 600 {
		now := start.Add(time.Duration(s) * time.Second)
		due, wait := workloadsDue(last, now, WorkloadsInterval)
		if !due {
			if wait <= 0 || wait > WorkloadsInterval {
				t.Fatalf("at %s: not due, but look again in %s", now, wait)
			}
			continue
		}
		last = now
		writes++
	}
	if writes != 10 {
		t.Errorf("%d writes of status.workloads in ten minutes of a report a second, want 10", writes)
	}
}

func TestBoundContainersClipsWhatADeviceReports(t *testing.T) {
	exited := time.Date(2026, 12, 5, 3, 4, 5, 600, time.FixedZone("X", 3600))
	huge := strings.Repeat("x", 100<<10)
	var c events.DeviceContainers
	for i := range 1000 {
		w := events.WorkloadContainers{Namespace: "lab", Deployment: fmt.Sprintf("d%04d", i), UID: "u", RevisionID: huge, Degraded: "CrashLoop\u202e"}
		for j := range 40 {
			w.Containers = append(w.Containers, events.ContainerState{Name: fmt.Sprintf("c%02d\x1b[31m", j), Role: "service", State: huge,
				Restarts: math.MaxInt64, ExitCode: math.MinInt64, Signal: "SIGKILL", OOMKilled: true, ExitedAt: &exited, Health: "\u2066healthy",
				ImageDigest: huge})
		}
		c.Workloads = append(c.Workloads, w)
	}
	// The same Deployment twice: the first one reported wins.
	c.Workloads = slices.Insert(c.Workloads, 1, events.WorkloadContainers{Namespace: "lab", Deployment: "d0000", RevisionID: "second"})
	b := boundContainers(c)

	if len(b.workloads) == 0 || len(b.workloads) > MaxDeviceWorkloads || !b.truncated || b.degraded != events.MaxContainerWorkloads-1 {
		t.Fatalf("%d workloads, truncated %v, degraded %d; want 1 to %d, true, 63 (of the first 64 reported, one twice)", len(b.workloads), b.truncated, b.degraded, MaxDeviceWorkloads)
	}
	w := b.workloads[0]
	if last := b.workloads[len(b.workloads)-1]; w.Deployment != "d0000" || last.Deployment != fmt.Sprintf("d%04d", len(b.workloads)-1) {
		t.Errorf("workloads %s … %s, want the first in name order", w.Deployment, last.Deployment)
	}
	if want := strings.Repeat("x", maxWorkloadRevision-len(events.CutMarker)) + events.CutMarker; w.Revision != want {
		t.Errorf("revision %q, want it cut to %d bytes (the first report of d0000)", w.Revision, maxWorkloadRevision)
	}
	if w.Degraded != `CrashLoop\u202e` {
		t.Errorf("degraded %q, want the override escaped", w.Degraded)
	}
	if len(w.Containers) != MaxDeviceWorkloadContainers {
		t.Fatalf("%d containers, want %d", len(w.Containers), MaxDeviceWorkloadContainers)
	}
	at := metav1.NewTime(time.Date(2026, 12, 5, 2, 4, 5, 0, time.UTC))
	want := fleetv1.DeviceContainer{Name: `c00\u001b[31m`, Role: "service", State: strings.Repeat("x", 13) + events.CutMarker,
		Restarts: math.MaxInt32, LastExit: &fleetv1.ContainerExit{Code: math.MinInt32, Signal: "SIGKILL", OOMKilled: true, At: &at},
		Health: `\u2066healthy`, ImageDigest: strings.Repeat("x", maxContainerDigest-len(events.CutMarker)) + events.CutMarker}
	if diff := cmp.Diff(want, w.Containers[0]); diff != "" {
		t.Errorf("container (-want +got):\n%s", diff)
	}
	raw, err := json.Marshal(fleetv1.DeviceStatus{Workloads: b.workloads, DegradedWorkloads: b.degraded, WorkloadsTruncated: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > MaxDeviceWorkloadsBytes+100 {
		t.Errorf("the worst status.workloads is %d bytes, over the %d-byte bound", len(raw), MaxDeviceWorkloadsBytes)
	}
	t.Logf("worst status.workloads: %d workloads, %d bytes of %d", len(b.workloads), len(raw), MaxDeviceWorkloadsBytes)

	t.Run("at most 32 small Deployments, the first in name order", func(t *testing.T) {
		var c events.DeviceContainers
		for i := range 1000 {
			c.Workloads = append(c.Workloads, events.WorkloadContainers{Namespace: "lab", Deployment: fmt.Sprintf("d%04d", (i+40)%1000),
				Containers: []events.ContainerState{{Name: "api", State: "running"}}})
		}
		b := boundContainers(c)
		if len(b.workloads) != MaxDeviceWorkloads || !b.truncated || b.workloads[0].Deployment != "d0040" || b.workloads[31].Deployment != "d0071" {
			t.Errorf("%d workloads (first %+v), truncated %v; want d0040 … d0071 (of the first 64 reported, in name order), truncated", len(b.workloads), b.workloads[len(b.workloads)-1], b.truncated)
		}
	})
	t.Run("a report within the bounds is kept whole", func(t *testing.T) {
		b := boundContainers(containersReport("r1", map[string]int{"api": 1, "web": 0}))
		if len(b.workloads) != 2 || b.truncated || b.degraded != 0 || b.workloads[0].Deployment != "api" {
			t.Errorf("%+v, want api and web, not truncated", b)
		}
	})
}

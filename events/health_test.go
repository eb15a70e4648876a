package events_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/nationtech/harmony-fleet/events"
)

func TestAHostileHealthReportIsClippedToTheContractsBounds(t *testing.T) {
	long := strings.Repeat("x", 10_000)
	svc := events.ServiceHealth{Name: long, State: "exited\x1b[31m", Signal: long, Health: long}
	for range 50 {
		svc.Logs = append(svc.Logs, strings.Repeat("é", 1000))
	}
	var svcs []events.ServiceHealth
	for range 100 {
		svcs = append(svcs, svc)
	}
	d := events.NewWorkloadHealth(events.TypeWorkloadDegraded, events.WorkloadHealth{Namespace: long, Deployment: long, UID: long,
		RevisionID: long, Reason: long, Services: svcs}).Clip()
	if d.EventType() != events.TypeWorkloadDegraded {
		t.Errorf("type %q after Clip", d.EventType())
	}
	if len(d.Services) != events.MaxHealthServices {
		t.Fatalf("%d services kept, want %d", len(d.Services), events.MaxHealthServices)
	}
	for _, s := range []string{d.Namespace, d.Deployment, d.UID, d.RevisionID, d.Reason, d.Services[0].Name, d.Services[0].Signal, d.Services[0].Health} {
		if len(s) > events.MaxHealthText {
			t.Errorf("a string of %d bytes kept, bound %d", len(s), events.MaxHealthText)
		}
	}
	if strings.Contains(d.Services[0].State, "\x1b") {
		t.Errorf("state %q keeps a control character", d.Services[0].State)
	}
	logs, total := d.Services[0].Logs, 0
	if len(logs) == 0 || len(logs) > events.MaxHealthLogLines {
		t.Errorf("%d log lines kept, want 1..%d", len(logs), events.MaxHealthLogLines)
	}
	for _, l := range logs {
		if n := utf8.RuneCountInString(l); n > events.MaxHealthLogLineRunes {
			t.Errorf("a log line of %d characters kept, bound %d", n, events.MaxHealthLogLineRunes)
		}
		total += len(l)
	}
	if total > events.MaxHealthServiceLogBytes {
		t.Errorf("%d bytes of logs kept, bound %d", total, events.MaxHealthServiceLogBytes)
	}
	if svcs[0].Name != long || len(svcs[0].Logs) != 50 {
		t.Error("Clip changed the report it was given")
	}
}

func TestAHostileContainersReportIsClippedAndMarkedTruncated(t *testing.T) {
	long := strings.Repeat("y", 5000)
	var cs []events.ContainerState
	for range 40 {
		cs = append(cs, events.ContainerState{Name: long, Role: long, State: long, ImageDigest: long})
	}
	var ws []events.WorkloadContainers
	for range 200 {
		ws = append(ws, events.WorkloadContainers{Namespace: long, Deployment: long, Containers: cs})
	}
	d := events.DeviceContainers{Workloads: ws}.Clip()
	if !d.Truncated || len(d.Workloads) != events.MaxContainerWorkloads || len(d.Workloads[0].Containers) != events.MaxWorkloadContainers {
		t.Fatalf("truncated %v, %d workloads, %d containers", d.Truncated, len(d.Workloads), len(d.Workloads[0].Containers))
	}
	if c := d.Workloads[0].Containers[0]; len(c.Name) > events.MaxHealthText || len(c.ImageDigest) > events.MaxHealthText || len(d.Workloads[0].Namespace) > events.MaxHealthText {
		t.Errorf("a string over %d bytes kept", events.MaxHealthText)
	}
	small := events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: "lab", Deployment: "api",
		Containers: []events.ContainerState{{Name: "api", Role: events.ContainerRoleService, State: "running", Restarts: 2}}}}}
	if got := small.Clip(); got.Truncated || got.Workloads[0].Containers[0] != small.Workloads[0].Containers[0] {
		t.Errorf("a report within the bounds changed: %+v", got)
	}
}

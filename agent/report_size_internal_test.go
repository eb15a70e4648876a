package agent

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

func TestEveryReportTheAgentBuildsFitsTheReportStreams(t *testing.T) {
	changes := make([]events.PackageChange, 3000)
	for i := range changes {
		changes[i] = events.PackageChange{Package: fmt.Sprintf("libsomething-very-long-name%04d", i), From: "2.36-9+deb12u4", To: "2.36-9+deb12u7"}
	}
	labels := map[string]string{}
	for i := range 3000 {
		labels[fmt.Sprintf("example.com/label-%04d", i)] = strings.Repeat("v", 63)
	}
	output := strings.Repeat("Unpacking libc6 (2.36-9+deb12u7) over (2.36-9+deb12u4) ...\n", events.MaxTaskOutput/60)
	long := strings.Repeat("podman: pulling registry.example.com/api:v2: manifest unknown; ", 5000)
	now := time.Now().UTC()
	tests := []struct {
		name  string
		data  events.Data
		check func(t *testing.T, got events.Event)
	}{
		{"a workload status with a 300 KB error keeps its first 4 KiB", events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: "u1",
			Generation: 1, RevisionID: "u1-1", Phase: events.WorkloadFailed, Error: long, Since: now},
			func(t *testing.T, got events.Event) {
				ws, _ := events.Decode[events.WorkloadStatus](got)
				if len(ws.Error) > events.MaxReportError || !strings.HasPrefix(ws.Error, long[:1000]) || !strings.HasSuffix(ws.Error, "…") {
					t.Errorf("error of %d bytes, want the first %d and a mark", len(ws.Error), events.MaxReportError)
				}
			}},
		{"a system upgrade of 3,000 packages keeps its output and the first changes that fit", events.TaskStatus{Namespace: "lab", TaskRun: "up",
			UID: "u2", Task: events.TaskSystemUpgrade, Phase: events.TaskSucceeded, Output: output, Changes: changes, Since: now},
			func(t *testing.T, got events.Event) {
				ts, _ := events.Decode[events.TaskStatus](got)
				if ts.Output != output {
					t.Errorf("output cut to %d bytes, want all %d", len(ts.Output), len(output))
				}
				if len(ts.Changes) < 300 || !slices.Equal(ts.Changes, changes[:len(ts.Changes)]) {
					t.Errorf("%d changes kept, want the first ones, at least 300", len(ts.Changes))
				}
			}},
		{"a failed task with huge output, error and changes fits", events.TaskStatus{Namespace: "lab", TaskRun: "up", UID: "u3",
			Task: events.TaskSystemUpgrade, Phase: events.TaskFailed, Error: long, Output: strings.Repeat("\x1b", events.MaxTaskOutput), Changes: changes, Since: now},
			func(t *testing.T, got events.Event) {
				ts, _ := events.Decode[events.TaskStatus](got)
				if len(ts.Error) > events.MaxReportError {
					t.Errorf("error of %d bytes", len(ts.Error))
				}
			}},
		{"a command result with a huge error keeps its first 4 KiB", events.CommandResult{CommandID: "c1", Command: "reconcile-now", Error: long},
			func(t *testing.T, got events.Event) {
				cr, _ := events.Decode[events.CommandResult](got)
				if len(cr.Error) > events.MaxReportError {
					t.Errorf("error of %d bytes", len(cr.Error))
				}
			}},
		{"an inventory with 3,000 labels keeps the first ones in key order", events.DeviceInventory{OS: "Debian", Arch: "arm64", Kernel: "6.1", AgentVersion: "v1", Labels: labels},
			func(t *testing.T, got events.Event) {
				inv, _ := events.Decode[events.DeviceInventory](got)
				keys := slices.Sorted(maps.Keys(labels))
				if len(inv.Labels) < 64 {
					t.Errorf("%d labels kept, want at least 64", len(inv.Labels))
				}
				for _, k := range keys[:len(inv.Labels)] {
					if inv.Labels[k] != labels[k] {
						t.Errorf("label %s not kept: the first keys in order are", k)
						break
					}
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := buildReport(events.Keys{Device: "d1"}, tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if len(m.Data) > events.MaxReportData {
				t.Fatalf("a %d-byte report, over %d", len(m.Data), events.MaxReportData)
			}
			ev, err := events.DecodeStored(m.Subject, m.Data)
			if err != nil {
				t.Fatalf("the report does not decode: %v", err)
			}
			tc.check(t, ev)
		})
	}
}

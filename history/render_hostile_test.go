package history_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// hostile is what a hostile device puts in every string it reports for
// `fleet history` to print: every hidden character, an OSC 8 link and an
// OSC 52 clipboard write, and a carriage return and line feed that start
// a fake row.
const hostile = poisontest.Hidden + "\x1b]8;;https://evil.example\x07click\x1b]8;;\x07\x1b]52;c;cm0gLXJmIH4=\x07\r\nFAKE ROW\tcell"

// TestTheTextOutputShowsADevicesTextEscaped: every answer's text output
// shows the device's text (errors, summaries, agent versions, inventory,
// labels, task messages) with every hidden character and terminal escape
// escaped, on the one line of its cell.
func TestTheTextOutputShowsADevicesTextEscaped(t *testing.T) {
	for _, tc := range hostileAnswers() {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := history.Write(&b, tc.answer, history.FormatText); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if i := strings.IndexFunc(out, func(r rune) bool { return r != '\n' && events.Invisible(r) }); i >= 0 {
				t.Errorf("the output holds %U raw: %q", []rune(out[i:])[0], out[max(0, i-60):min(len(out), i+60)])
			}
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "FAKE") {
					t.Errorf("the device's line feed starts a row of its own: %q", l)
				}
			}
			for _, want := range []string{`v1\u202egnp.exe`, `\u001b]8;;https://evil.example\u0007`, `\u001b]52;c;`, `\u000d\u000aFAKE ROW`} {
				if !strings.Contains(out, want) {
					t.Errorf("the output lacks %s:\n%s", want, out)
				}
			}
		})
	}
}

type hostileAnswer struct {
	name   string
	answer history.Answer
}

// hostileAnswers are an answer of every kind with hostile in every string
// a device gave.
func hostileAnswers() []hostileAnswer {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	entry := history.Entry{Time: now, ID: "01J", Type: events.TypeWorkloadStatus, Summary: "Failed: " + hostile, Ignored: hostile}
	degraded := []history.HealthState{{Device: "d1", Deployment: "lab/api", Generation: 1, Reason: hostile, Summary: "d1 degraded: " + hostile, Since: now}}
	containers := &history.ContainersSnapshot{Stored: now, Workloads: []events.WorkloadContainers{{Namespace: "lab", Deployment: "api", Generation: 1,
		Degraded: hostile, Containers: []events.ContainerState{{Name: hostile, Role: hostile, State: hostile, Signal: hostile, Health: hostile, ImageDigest: hostile}}}}}
	return []hostileAnswer{
		{"a Deployment's timeline", &history.DeploymentTimeline{Namespace: "lab", Name: "api",
			State: &history.RolloutState{RevisionID: "1-abc", Generation: 1, Phase: "Failed", Message: "1 failed: " + hostile},
			Revisions: []history.Revision{{Generation: 1, RevisionID: "1-abc", Targets: []string{"d1"},
				Results: []history.DeviceResult{{Device: "d1", Phase: events.WorkloadFailed, Error: hostile, Reports: 1}}}},
			Entries: []history.Entry{entry}, Degraded: degraded}},
		{"a device's timeline", &history.DeviceTimeline{Device: "d1", Degraded: degraded, Containers: containers,
			Heartbeats: history.HeartbeatSummary{Count: 1, First: now, Last: now, AgentVersions: []string{hostile}},
			Inventory:  &events.DeviceInventory{OS: hostile, Arch: "arm64", Kernel: hostile, AgentVersion: hostile, Labels: map[string]string{"site": hostile}},
			Entries:    []history.Entry{entry}}},
		{"the fleet at a time", &history.FleetState{At: now,
			Deployments: []history.RolloutState{{Namespace: "lab", Name: "api", Phase: "Failed", Message: hostile}},
			Devices: []history.DeviceState{{Device: "d1", Reported: []history.Report{{Namespace: "lab", Deployment: "api", Generation: 1,
				RevisionID: "1-abc", Phase: events.WorkloadFailed, Error: hostile}}, Degraded: degraded}}, DegradedDevices: 1}},
		{"a TaskRun's timeline", &history.TaskRunTimeline{Namespace: "lab", Name: "upgrade", UID: "u", Task: "system-upgrade", Created: now,
			Status:  &fleetv1.TaskRunStatus{Phase: fleetv1.TaskRunFailed, Conditions: []metav1.Condition{{Type: fleetv1.ConditionReady, Message: hostile}}},
			Results: []fleetv1.TaskDeviceResult{{Device: "d1", Phase: events.TaskFailed, AgentVersion: hostile, Message: hostile}},
			Entries: []history.Entry{entry}}},
	}
}

// TestTheJSONOutputEscapesADevicesTextLosslessly: the JSON output holds no
// hidden character raw (encoding/json leaves DEL, C1 controls and bidi
// characters as they are) and decodes to the same answer.
func TestTheJSONOutputEscapesADevicesTextLosslessly(t *testing.T) {
	for _, tc := range hostileAnswers() {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := history.Write(&b, tc.answer, history.FormatJSON); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			if i := strings.IndexFunc(out, func(r rune) bool { return r != '\n' && events.Invisible(r) }); i >= 0 {
				t.Errorf("the output holds %U raw: %q", []rune(out[i:])[0], out[max(0, i-60):min(len(out), i+60)])
			}
			plain, err := json.Marshal(tc.answer)
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(b.Bytes(), &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(plain, &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("the output decodes to another answer (-want +got):\n%s", diff)
			}
		})
	}
}

package history_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// TestTaskRunHistoryShowsEveryDevicesResult stores a TaskRun with more
// targets than its status carries results for, the devices' reports (some
// hostile), and its deletion, and expects every target's result.
func TestTaskRunHistoryShowsEveryDevicesResult(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	write := func(keys events.Keys, d events.Data) {
		t.Helper()
		ev, err := events.New(keys, d)
		if err != nil {
			t.Fatal(err)
		}
		natstest.Write(t, ctx, st, ev)
	}
	tr := events.Keys{Namespace: "lab", Name: "upgrade"}
	var targets []string
	for i := range fleetv1.MaxTaskRunResults + 10 {
		targets = append(targets, fmt.Sprintf("edge-%03d", i))
	}
	// An older TaskRun of the same name, deleted: its reports do not count.
	write(tr, events.TaskRunCreated{UID: "old", Generation: 1, Task: events.TaskSystemUpgrade, Targets: targets[:1]})
	write(tr, events.TaskRunDeleted{UID: "old"})
	write(tr, events.TaskRunCreated{UID: "u1", Generation: 1, Task: events.TaskSystemUpgrade, Targets: targets})
	report := func(device, uid, phase, errText string, changes int) {
		t.Helper()
		d := events.TaskStatus{Namespace: "lab", TaskRun: "upgrade", UID: uid, Task: events.TaskSystemUpgrade, Phase: phase, Error: errText,
			Since: time.Now().UTC()}
		for i := range changes {
			d.Changes = append(d.Changes, events.PackageChange{Package: fmt.Sprintf("p%d", i), From: "1", To: "2"})
		}
		write(events.Keys{Device: device}, d)
	}
	report("edge-000", "old", events.TaskFailed, "old run", 0)
	for i, d := range targets {
		report(d, "u1", events.TaskRunning, "", 0)
		if i == 7 {
			report(d, "u1", events.TaskFailed, "dpkg: error processing package\nlibc6", 0)
			continue
		}
		report(d, "u1", events.TaskSucceeded, "", 3)
	}
	report("intruder", "u1", events.TaskFailed, "not a target", 0)
	// Another TaskRun's report on the shared stream is not part of this
	// timeline.
	write(events.Keys{Device: "edge-000"}, events.TaskStatus{Namespace: "lab", TaskRun: "other", UID: "x", Phase: events.TaskFailed, Since: time.Now()})
	write(tr, events.TaskRunDeleted{UID: "u1"})

	h, err := history.New(history.Options{Reader: st})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := h.TaskRun(ctx, "lab", "upgrade")
	if err != nil {
		t.Fatal(err)
	}
	if tl.UID != "u1" || !tl.Deleted || len(tl.Targets) != len(targets) {
		t.Errorf("uid %s, deleted %v, %d targets", tl.UID, tl.Deleted, len(tl.Targets))
	}
	if len(tl.Results) != len(targets) {
		t.Fatalf("%d results, want one per target (%d)", len(tl.Results), len(targets))
	}
	if diff := cmp.Diff(fleetv1.TaskDeviceResult{Device: "edge-007", Phase: events.TaskFailed, Message: "dpkg: error processing package\nlibc6"},
		tl.Results[7], cmpopts.IgnoreFields(fleetv1.TaskDeviceResult{}, "Since")); diff != "" {
		t.Errorf("edge-007 (-want +got):\n%s", diff)
	}
	if r := tl.Results[8]; r.Phase != events.TaskSucceeded || r.ChangedPackages != 3 {
		t.Errorf("edge-008 %+v", r)
	}
	if s := tl.Status; s == nil || s.Phase != fleetv1.TaskRunFailed || s.Counts.Failed != 1 || s.Counts.Succeeded != int32(len(targets)-1) {
		t.Errorf("status %+v", tl.Status)
	}
	ignored := map[string]int{}
	for _, e := range tl.Entries {
		if e.Ignored != "" {
			ignored[e.Ignored]++
		}
	}
	if diff := cmp.Diff(map[string]int{"report of another or a deleted TaskRun UID": 1, "device is not a frozen target of this TaskRun": 1}, ignored); diff != "" {
		t.Errorf("ignored reports (-want +got):\n%s", diff)
	}

	t.Run("the text form lists every device and says which reports were ignored", func(t *testing.T) {
		var b bytes.Buffer
		if err := history.Write(&b, tl, history.FormatText); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		for _, want := range []string{"TaskRun lab/upgrade", "RESULTS", targets[len(targets)-1], "dpkg: error processing package libc6",
			"(TaskRun deleted)", "ignored: device is not a frozen target"} {
			if !strings.Contains(out, want) {
				t.Errorf("text lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("an unknown TaskRun is ErrNoEvents", func(t *testing.T) {
		if _, err := h.TaskRun(ctx, "lab", "nothing"); !errors.Is(err, history.ErrNoEvents) {
			t.Errorf("err %v, want ErrNoEvents", err)
		}
	})
}

func TestADevicesTimelineShowsItsTaskEntriesComeAndGo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	write := func(keys events.Keys, d events.Data) {
		t.Helper()
		ev, err := events.New(keys, d)
		if err != nil {
			t.Fatal(err)
		}
		natstest.Write(t, ctx, st, ev)
	}
	tr := events.Keys{Namespace: "lab", Name: "upgrade"}
	write(tr, events.TaskRunCreated{UID: "u1", Generation: 1, Task: events.TaskSystemUpgrade, Targets: []string{"edge-1"}})
	write(events.Keys{Namespace: "lab", Name: "agent"}, events.TaskRunCreated{UID: "u2", Generation: 1, Task: events.TaskAgentUpgrade,
		Targets: []string{"edge-1"}, Agent: &events.AgentArtifact{URL: "https://example.com/a", SHA256: strings.Repeat("a", 64), Version: "v2"}})
	write(tr, events.TaskRunDeleted{UID: "u1"})
	h, err := history.New(history.Options{Reader: st})
	if err != nil {
		t.Fatal(err)
	}
	tl, err := h.Device(ctx, "edge-1")
	if err != nil {
		t.Fatal(err)
	}
	var changes []string
	for _, e := range tl.Entries {
		if e.Type == history.EntryIntentChanged {
			changes = append(changes, e.Summary)
		}
	}
	want := []string{
		"intent changed by taskrun.created: +task lab/upgrade system-upgrade (uid u1)",
		"intent changed by taskrun.created: +task lab/agent agent-upgrade (uid u2)",
		"intent changed by taskrun.deleted: -task lab/upgrade",
	}
	if diff := cmp.Diff(want, changes); diff != "" {
		t.Errorf("intent changes (-want +got):\n%s", diff)
	}
	if len(tl.Tasks) != 1 || tl.Tasks[0].TaskRun != "agent" {
		t.Errorf("tasks now %+v, want the agent-upgrade only", tl.Tasks)
	}
	var b bytes.Buffer
	if err := history.Write(&b, tl, history.FormatText); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "TASKS NOW") || !strings.Contains(b.String(), "lab/agent") {
		t.Errorf("text lacks the tasks now:\n%s", b.String())
	}
}

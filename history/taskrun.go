package history

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

// TaskRunTimeline is a TaskRun's history: its creation with the frozen
// targets, every target's result whatever their number (the TaskRun status
// carries them only up to fleetv1.MaxTaskRunResults), the status the
// operator folds, and every intent event and task report in stored order.
type TaskRunTimeline struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// UID, Task, Agent and Targets are the current creation's (the last
	// TaskRun of this name); Created is when it was stored.
	UID     string                `json:"uid,omitempty"`
	Task    string                `json:"task,omitempty"`
	Agent   *events.AgentArtifact `json:"agent,omitempty"`
	Targets []string              `json:"targets"`
	Created time.Time             `json:"created,omitzero"`
	// Deleted is true once that TaskRun was deleted.
	Deleted bool `json:"deleted,omitempty"`
	// Status is the status the operator folds from the same events (for a
	// deleted TaskRun: as it was, with the reports of devices that were
	// running it when it was deleted); Results every target's result.
	Status  *fleetv1.TaskRunStatus     `json:"status,omitempty"`
	Results []fleetv1.TaskDeviceResult `json:"results"`
	// Entries is the timeline.
	Entries []Entry `json:"entries"`
}

// filterTaskReports are every device's task reports.
const filterTaskReports = "fleet.report.*.task"

// TaskRun returns the timeline of TaskRun namespace/name. It reads the
// TaskRun's intent subject and the task reports stored since its first
// intent event (the reports stream is shared, so that part is a scan), and
// folds them as the operator does (projections.TaskRuns). ErrNoEvents when
// the TaskRun has no intent event.
func (h *History) TaskRun(ctx context.Context, namespace, name string) (*TaskRunTimeline, error) {
	subj, err := events.TaskRunIntentSubject(namespace, name)
	if err != nil {
		return nil, fmt.Errorf("history of TaskRun: %w", err)
	}
	intent, err := h.collect(ctx, time.Time{}, read{filter: subj, from: events.FromStart()})
	if err != nil {
		return nil, err
	}
	if len(intent) == 0 {
		return nil, fmt.Errorf("%w for TaskRun %s/%s (subject %s in %s): check the namespace and name, and that the operator created it (kubectl get taskrun)",
			ErrNoEvents, namespace, name, subj, events.StreamIntent)
	}
	reports, err := h.collect(ctx, time.Time{}, read{filter: filterTaskReports, from: events.FromTime(intent[0].Stored),
		keep: func(rec events.Record) bool {
			d, err := events.Decode[events.TaskStatus](rec.Event)
			if err != nil {
				h.skipData(ctx, rec, err)
				return false
			}
			return d.Namespace == namespace && d.TaskRun == name
		}})
	if err != nil {
		return nil, err
	}
	// A chunked creation is read whole (ADR 0010), as the operator reads
	// it; its chunks stay as entries of their own.
	var chunks events.RevisionAssembler
	for i, rec := range intent {
		whole, ok, err := chunks.Add(rec.Event)
		if err != nil {
			h.skipData(ctx, rec, err)
		} else if ok {
			intent[i].Event = whole
		}
	}
	// The operator folds the whole intent history before any report: so
	// does this fold, then it renders everything in stored order.
	k := projections.TaskRunKey{Namespace: namespace, Name: name}
	fold := projections.NewTaskRuns()
	tl := &TaskRunTimeline{Namespace: namespace, Name: name, Targets: []string{}, Results: []fleetv1.TaskDeviceResult{}, Entries: []Entry{}}
	ignored := map[uint64]string{}
	for _, rec := range intent {
		tl.intentEvent(rec)
	}
	for _, rec := range intent {
		// The last TaskRun's deletion is not folded: its results stay
		// (a device that was running it finishes and reports).
		if d, err := events.Decode[events.TaskRunDeleted](rec.Event); err == nil && rec.Event.Type == events.TypeTaskRunDeleted && d.UID == tl.UID {
			continue
		}
		if err := fold.ApplyIntent(rec); err != nil {
			h.skipData(ctx, rec, err)
		}
	}
	for _, rec := range reports {
		why, _ := fold.ApplyReport(rec) // decoded by keep
		ignored[rec.Sequence] = why
	}
	for _, rec := range mergeSorted(intent, reports) {
		e := entryOf(rec)
		e.Deployment = namespace + "/" + name
		if rec.Stream == events.StreamReports {
			e.Summary = taskReportSummary(rec)
			e.Ignored = ignored[rec.Sequence]
		} else {
			e.Summary = taskIntentSummary(rec)
		}
		tl.Entries = append(tl.Entries, e)
	}
	if st, ok := fold.Status(k); ok {
		tl.Status = &st
		tl.Results = fold.Results(k)
	}
	return tl, nil
}

// intentEvent records the TaskRun's creation and deletion.
func (tl *TaskRunTimeline) intentEvent(rec events.Record) {
	switch rec.Event.Type {
	case events.TypeTaskRunCreated:
		if c, err := events.Decode[events.TaskRunCreated](rec.Event); err == nil {
			tl.UID, tl.Task, tl.Agent, tl.Targets, tl.Created, tl.Deleted = c.UID, c.Task, c.Agent, sortedSet(c.Targets), rec.Stored.UTC(), false
		}
	case events.TypeTaskRunDeleted:
		if d, err := events.Decode[events.TaskRunDeleted](rec.Event); err == nil && d.UID == tl.UID {
			tl.Deleted = true
		}
	}
}

func taskIntentSummary(rec events.Record) string {
	switch rec.Event.Type {
	case events.TypeTaskRunCreated:
		c, err := events.Decode[events.TaskRunCreated](rec.Event)
		if err != nil {
			break
		}
		s := fmt.Sprintf("TaskRun created (uid %s): %s on %d targets %s", c.UID, c.Task, len(c.Targets), list(sortedSet(c.Targets)))
		if c.Agent != nil {
			s += fmt.Sprintf(", agent %s from %s (sha256 %s)", c.Agent.Version, c.Agent.URL, c.Agent.SHA256)
		}
		return s
	case events.TypeTaskRunTargets:
		if c, err := events.Decode[events.TaskRunTargets](rec.Event); err == nil {
			return fmt.Sprintf("TaskRun target chunk %d (uid %s): %d targets", c.Chunk, c.UID, len(c.Targets))
		}
	case events.TypeTaskRunDeleted:
		if d, err := events.Decode[events.TaskRunDeleted](rec.Event); err == nil {
			return fmt.Sprintf("TaskRun deleted (uid %s): its task leaves the targets' intent; a device already running it finishes", d.UID)
		}
	}
	return string(rec.Event.Type)
}

func taskReportSummary(rec events.Record) string {
	d, err := events.Decode[events.TaskStatus](rec.Event)
	if err != nil {
		return string(rec.Event.Type)
	}
	s := fmt.Sprintf("%s reports %s", rec.Event.Keys.Device, d.Phase)
	if d.Error != "" {
		s += ": " + oneLine(d.Error)
	}
	if len(d.Changes) > 0 {
		s += fmt.Sprintf(" (%d packages changed)", len(d.Changes))
	}
	if d.AgentVersion != "" {
		s += " (agent " + d.AgentVersion + ")"
	}
	return s
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 200 {
		s = string(r[:200]) + "…"
	}
	return s
}

func (tl *TaskRunTimeline) writeText(w io.Writer) error {
	line(w, "TaskRun %s/%s", tl.Namespace, tl.Name)
	if tl.UID != "" {
		created := fmt.Sprintf("task %s (uid %s) created %s, %d targets", tl.Task, tl.UID, timeText(tl.Created), len(tl.Targets))
		if tl.Agent != nil {
			created += fmt.Sprintf(", agent %s from %s", tl.Agent.Version, tl.Agent.URL)
		}
		line(w, "%s", created)
	}
	if st := tl.Status; st != nil {
		msg := ""
		if len(st.Conditions) > 0 {
			msg = ": " + st.Conditions[0].Message
		}
		deleted := ""
		if tl.Deleted {
			deleted = " (TaskRun deleted)"
		}
		line(w, "now: %s, %d/%d succeeded, %d failed, %d running, %d pending%s%s", st.Phase, st.Counts.Succeeded, st.Counts.Targets,
			st.Counts.Failed, st.Counts.Running, st.Counts.Pending, msg, deleted)
	}
	fmt.Fprintln(w, "\nRESULTS (latest report per target)")
	t := newTable(w, "DEVICE", "PHASE", "SINCE", "AGENT", "PACKAGES", "MESSAGE")
	for _, r := range tl.Results {
		since := "-"
		if r.Since != nil {
			since = timeText(r.Since.Time)
		}
		pkgs := "-"
		if r.ChangedPackages > 0 {
			pkgs = fmt.Sprint(r.ChangedPackages)
		}
		t.row(r.Device, r.Phase, since, dash(r.AgentVersion), pkgs, dash(oneLine(r.Message)))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nTIMELINE")
	t = newTable(w, "TIME", "EVENT", "TYPE", "SUMMARY")
	for _, e := range tl.Entries {
		sum := e.Summary
		if e.Ignored != "" {
			sum += " (ignored: " + e.Ignored + ")"
		}
		t.row(timeText(e.Time), e.ID, string(e.Type), sum)
	}
	return t.flush()
}

package projections

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// TaskRuns is the fold of TaskRun intent (taskrun.created,
// taskrun.deleted) and the devices' device.task.status reports into each
// TaskRun's status: phase, counts, latest failure, per-device results and
// the Ready condition. The operator's TaskRun runner writes what it gives
// to the TaskRuns' status; `fleet history taskrun` shows it with every
// device's result.
//
// Reports are folded in the order they are given (the report stream's
// order); a report about a TaskRun UID whose creation was not folded yet
// is kept (bounded) until it is. Device input is data: a report that is
// not about a frozen target of the UID it names, names another TaskRun's
// or a deleted UID, an unknown phase or another task, or comes after the
// device's result, is ignored and counted (Ignored says why).
//
// TaskRuns is mutable and not safe for concurrent use; it does no I/O.
type TaskRuns struct {
	runs map[TaskRunKey]*taskRunState
	// uids are every UID created (→ its TaskRun) and deleted: a report of a
	// known UID for another TaskRun, or of a deleted one, is ignored.
	uids    map[string]TaskRunKey
	deleted map[string]bool
	// early are the reports of UIDs not created yet, in stream order.
	early      map[string][]taskReport
	earlyCount int
	// dirty are the TaskRuns whose status may have changed.
	dirty map[TaskRunKey]bool
	// ignored counts the reports not applied; dropped those past
	// maxEarlyTaskReports.
	ignored, dropped uint64
}

// TaskRunKey names a TaskRun.
type TaskRunKey struct{ Namespace, Name string }

// Reasons a task report is ignored.
const (
	IgnoredNotTarget    = "device is not a frozen target of this TaskRun"
	IgnoredOtherUID     = "report of another or a deleted TaskRun UID"
	IgnoredUnknownPhase = "unknown phase"
	IgnoredOtherTask    = "report names another task"
	IgnoredAfterResult  = "the device already reported its result (a task runs once)"
	IgnoredEarlyBound   = "too many reports of TaskRuns not created yet"
)

// taskRunState is what the fold knows of the current UID of one TaskRun.
type taskRunState struct {
	uid        string
	generation int64
	task       string
	targets    []string // sorted, frozen
	isTarget   map[string]bool
	results    map[string]taskResult
	failure    *fleetv1.TaskFailure
	// ready and readySince: the Ready status last computed and the stored
	// time of the event that set it (its lastTransitionTime, the same on
	// every rebuild).
	ready      metav1.ConditionStatus
	readySince time.Time
}

// taskResult is what one target last reported.
type taskResult struct {
	phase        string
	message      string
	agentVersion string
	changed      int32
	since        time.Time
}

// taskReport is a report kept until its TaskRun's creation is folded.
type taskReport struct {
	device string
	st     events.TaskStatus
	stored time.Time
}

// maxEarlyTaskReports bounds the reports the fold keeps for TaskRun UIDs
// whose creation it has not folded yet (the intent stream is read ahead of
// the reports, so only a lagging follower or a device naming UIDs that do
// not exist makes them). Past the bound a report is dropped and counted.
const maxEarlyTaskReports = 4096

// NewTaskRuns returns an empty fold.
func NewTaskRuns() *TaskRuns {
	return &TaskRuns{runs: map[TaskRunKey]*taskRunState{}, uids: map[string]TaskRunKey{}, deleted: map[string]bool{},
		early: map[string][]taskReport{}, dirty: map[TaskRunKey]bool{}}
}

// ApplyIntent folds a taskrun.created or taskrun.deleted record (others are
// ignored, and so is a creation that still names target chunks: feed the
// intent through an events.RevisionAssembler first); an error only when its
// data does not decode.
func (f *TaskRuns) ApplyIntent(rec events.Record) error {
	ev := rec.Event
	k := TaskRunKey{ev.Keys.Namespace, ev.Keys.Name}
	switch ev.Type {
	case events.TypeTaskRunCreated:
		c, err := events.Decode[events.TaskRunCreated](ev)
		if err != nil {
			return err
		}
		if _, dup := f.uids[c.UID]; dup || c.UID == "" || c.TargetChunks > 0 {
			return nil // a chunked creation is folded once assembled (events.RevisionAssembler)
		}
		f.uids[c.UID] = k
		if f.deleted[c.UID] {
			return nil
		}
		st := &taskRunState{uid: c.UID, generation: c.Generation, task: c.Task, targets: slices.Compact(slices.Sorted(slices.Values(c.Targets))),
			isTarget: map[string]bool{}, results: map[string]taskResult{}}
		for _, t := range st.targets {
			st.isTarget[t] = true
		}
		st.ready, st.readySince = st.readyStatus(), cmp.Or(rec.Stored, ev.Time)
		f.runs[k] = st
		f.dirty[k] = true
		if early := f.early[c.UID]; len(early) > 0 {
			delete(f.early, c.UID)
			f.earlyCount -= len(early)
			for _, r := range early {
				_ = f.apply(k, st, r) // counted in ignored
			}
		}
	case events.TypeTaskRunDeleted:
		d, err := events.Decode[events.TaskRunDeleted](ev)
		if err != nil {
			return err
		}
		f.deleted[d.UID] = true
		if early := f.early[d.UID]; len(early) > 0 {
			delete(f.early, d.UID)
			f.earlyCount -= len(early)
		}
		if st := f.runs[k]; st != nil && st.uid == d.UID {
			delete(f.runs, k)
			delete(f.dirty, k)
		}
	}
	return nil
}

// ApplyReport folds one device.task.status record; the device is the one
// its subject names (the reader refuses an envelope naming another). It
// returns why the report was ignored ("" when it counted, or is kept until
// its TaskRun's creation), and an error only when the data does not
// decode.
func (f *TaskRuns) ApplyReport(rec events.Record) (ignored string, err error) {
	st, err := events.Decode[events.TaskStatus](rec.Event)
	if err != nil {
		return "", err
	}
	r := taskReport{device: rec.Event.Keys.Device, st: st, stored: cmp.Or(rec.Stored, rec.Event.Time)}
	k := TaskRunKey{st.Namespace, st.TaskRun}
	if run := f.runs[k]; run != nil && run.uid == st.UID {
		return f.apply(k, run, r), nil
	}
	if _, known := f.uids[st.UID]; known || f.deleted[st.UID] || st.UID == "" {
		f.ignored++
		return IgnoredOtherUID, nil
	}
	if f.earlyCount >= maxEarlyTaskReports {
		f.dropped++
		return IgnoredEarlyBound, nil
	}
	f.early[st.UID] = append(f.early[st.UID], r)
	f.earlyCount++
	return "", nil
}

// Ignored returns how many reports the fold did not apply, the dropped
// ones included.
func (f *TaskRuns) Ignored() uint64 { return f.ignored + f.dropped }

// apply folds one report of the TaskRun's current UID and says why it was
// ignored ("" when it counted).
func (f *TaskRuns) apply(k TaskRunKey, run *taskRunState, r taskReport) string {
	why := ""
	switch {
	case r.st.Namespace != k.Namespace || r.st.TaskRun != k.Name || r.st.UID != run.uid:
		why = IgnoredOtherUID
	case !run.isTarget[r.device]:
		why = IgnoredNotTarget
	case r.st.Task != "" && r.st.Task != run.task:
		why = IgnoredOtherTask
	case r.st.Phase != events.TaskPending && r.st.Phase != events.TaskRunning && r.st.Phase != events.TaskSucceeded && r.st.Phase != events.TaskFailed:
		why = IgnoredUnknownPhase
	default:
		if prev, ok := run.results[r.device]; ok && final(prev.phase) {
			why = IgnoredAfterResult
		}
	}
	if why != "" {
		f.ignored++
		return why
	}
	res := taskResult{phase: r.st.Phase, agentVersion: r.st.AgentVersion, changed: int32(min(len(r.st.Changes), 1<<30)),
		since: cmp.Or(r.st.Since, r.stored)}
	if r.st.Phase == events.TaskFailed {
		res.message = cmp.Or(r.st.Error, "failed (the device gave no error)")
		run.failure = &fleetv1.TaskFailure{Device: r.device, Message: events.PrintableLinesCut(res.message, MaxDeviceText), Time: metav1.NewTime(res.since.UTC().Truncate(time.Second))}
	}
	run.results[r.device] = res
	if s := run.readyStatus(); s != run.ready {
		run.ready, run.readySince = s, r.stored
	}
	f.dirty[k] = true
	return ""
}

// Status returns the status of TaskRun k as folded so far; false when its
// creation was not folded (or it was deleted). The same streams always
// give the same status.
func (f *TaskRuns) Status(k TaskRunKey) (fleetv1.TaskRunStatus, bool) {
	run := f.runs[k]
	if run == nil {
		return fleetv1.TaskRunStatus{}, false
	}
	return run.status(), true
}

// Results returns every frozen target's result of TaskRun k, sorted by
// device, whatever the number of targets (Status carries them only up to
// fleetv1.MaxTaskRunResults).
func (f *TaskRuns) Results(k TaskRunKey) []fleetv1.TaskDeviceResult {
	run := f.runs[k]
	if run == nil {
		return nil
	}
	return run.resultList()
}

// UID returns the UID of TaskRun k the fold follows ("" when none).
func (f *TaskRuns) UID(k TaskRunKey) string {
	if run := f.runs[k]; run != nil {
		return run.uid
	}
	return ""
}

// TakeDirty returns the TaskRuns whose status may have changed since the
// last call, sorted, and forgets them. A deleted TaskRun is not among them.
func (f *TaskRuns) TakeDirty() []TaskRunKey {
	out := make([]TaskRunKey, 0, len(f.dirty))
	for k := range f.dirty {
		if f.runs[k] != nil {
			out = append(out, k)
		}
	}
	clear(f.dirty)
	slices.SortFunc(out, func(a, b TaskRunKey) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return out
}

// MarkDirty makes TaskRun k part of the next TakeDirty (a status write
// that failed, to be retried).
func (f *TaskRuns) MarkDirty(k TaskRunKey) { f.dirty[k] = true }

// Len returns how many TaskRuns the fold follows.
func (f *TaskRuns) Len() int { return len(f.runs) }

// resultList lists every target's result, sorted by device.
func (run *taskRunState) resultList() []fleetv1.TaskDeviceResult {
	out := make([]fleetv1.TaskDeviceResult, 0, len(run.targets))
	for _, t := range run.targets {
		r, ok := run.results[t]
		dr := fleetv1.TaskDeviceResult{Device: t, Phase: events.TaskPending}
		if ok {
			// Message and agent version are the device's text: escaped,
			// then cut (50 results of a hostile device's 60 KiB would
			// take the object past etcd's limit).
			dr.Phase, dr.Message, dr.AgentVersion, dr.ChangedPackages = r.phase, events.PrintableLinesCut(r.message, MaxDeviceText),
				events.PrintableCut(r.agentVersion, MaxAgentVersionText), r.changed
			since := metav1.NewTime(r.since.UTC().Truncate(time.Second))
			dr.Since = &since
		}
		out = append(out, dr)
	}
	return out
}

func final(phase string) bool { return phase == events.TaskSucceeded || phase == events.TaskFailed }

// counts counts the targets by the phase they last reported.
func (run *taskRunState) counts() fleetv1.TaskRunCounts {
	c := fleetv1.TaskRunCounts{Targets: int32(len(run.targets))}
	for _, t := range run.targets {
		switch run.results[t].phase {
		case events.TaskRunning:
			c.Running++
		case events.TaskSucceeded:
			c.Succeeded++
		case events.TaskFailed:
			c.Failed++
		default:
			c.Pending++
		}
	}
	return c
}

// taskRunPhase decides a TaskRun's phase from its counts (the phases are
// defined on fleetv1.TaskRunPhase).
func taskRunPhase(c fleetv1.TaskRunCounts) fleetv1.TaskRunPhase {
	switch {
	case c.Targets == 0:
		return fleetv1.TaskRunFailed // nothing can ever run: never Succeeded
	case c.Succeeded == c.Targets:
		return fleetv1.TaskRunSucceeded
	case c.Succeeded+c.Failed == c.Targets:
		return fleetv1.TaskRunFailed
	case c.Pending == c.Targets:
		return fleetv1.TaskRunPending
	default:
		return fleetv1.TaskRunRunning
	}
}

func (run *taskRunState) readyStatus() metav1.ConditionStatus {
	if taskRunPhase(run.counts()) == fleetv1.TaskRunSucceeded {
		return metav1.ConditionTrue
	}
	return metav1.ConditionFalse
}

// status is the TaskRun status the fold gives: the same on every rebuild
// from the same streams.
func (run *taskRunState) status() fleetv1.TaskRunStatus {
	c := run.counts()
	phase := taskRunPhase(c)
	st := fleetv1.TaskRunStatus{ObservedGeneration: run.generation, Phase: phase, Counts: c, LatestFailure: run.failure}
	if len(run.targets) <= fleetv1.MaxTaskRunResults {
		st.Results = run.resultList()
	}
	ready := metav1.Condition{Type: fleetv1.ConditionReady, Status: run.ready, ObservedGeneration: run.generation,
		LastTransitionTime: metav1.NewTime(run.readySince.UTC().Truncate(time.Second))}
	switch {
	case c.Targets == 0:
		ready.Reason = fleetv1.ReasonNoTargets
		ready.Message = "the TaskRun froze no target when it was created (TargetsResolved says why), so the task runs nowhere: its phase is Failed, never Succeeded; create a new TaskRun once devices match"
	case phase == fleetv1.TaskRunSucceeded:
		ready.Reason = fleetv1.ReasonTaskSucceeded
		ready.Message = fmt.Sprintf("all %d targets succeeded", c.Targets)
	case phase == fleetv1.TaskRunFailed:
		ready.Reason = fleetv1.ReasonTaskFailed
		ready.Message = fmt.Sprintf("%d of %d targets failed (latest: %s)", c.Failed, c.Targets, latest(run.failure))
	default:
		ready.Reason = fleetv1.ReasonTaskInProgress
		ready.Message = fmt.Sprintf("%d of %d targets finished: %d succeeded, %d failed, %d running, %d pending",
			c.Succeeded+c.Failed, c.Targets, c.Succeeded, c.Failed, c.Running, c.Pending)
	}
	ready.Message = events.PrintableLinesCut(ready.Message, MaxConditionMessage)
	st.Conditions = []metav1.Condition{ready}
	return st
}

func latest(f *fleetv1.TaskFailure) string {
	if f == nil {
		return "none"
	}
	msg := f.Message
	if r := []rune(msg); len(r) > 200 {
		msg = string(r[:200]) + "…"
	}
	return f.Device + ": " + strings.ReplaceAll(msg, "\n", " ")
}

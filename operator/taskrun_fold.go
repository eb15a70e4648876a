package operator

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

// The TaskRun runner's fold: TaskRun intent (taskrun.created,
// taskrun.deleted) and the devices' device.task.status reports in, each
// TaskRun's status out. No I/O here.

// trKey names a TaskRun.
type trKey struct{ ns, name string }

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

// taskFold is the TaskRun runner's state, owned by its Run goroutine.
type taskFold struct {
	runs map[trKey]*taskRunState
	// uids are every UID created (→ its TaskRun) and deleted: a report of a
	// known UID for another TaskRun, or of a deleted one, is ignored.
	uids    map[string]trKey
	deleted map[string]bool
	// early are the reports of UIDs not created yet, in stream order.
	early      map[string][]taskReport
	earlyCount int
	// dirty are the TaskRuns whose status may have changed.
	dirty map[trKey]bool
	// ignored counts the reports the fold did not apply (not a target,
	// another UID, an unknown phase or task, a late report after a
	// result); dropped those past maxEarlyTaskReports.
	ignored, dropped uint64
}

func newTaskFold() *taskFold {
	return &taskFold{runs: map[trKey]*taskRunState{}, uids: map[string]trKey{}, deleted: map[string]bool{},
		early: map[string][]taskReport{}, dirty: map[trKey]bool{}}
}

// foldIntent applies a taskrun.created or taskrun.deleted event.
func (f *taskFold) foldIntent(rec events.Record) error {
	ev := rec.Event
	k := trKey{ev.Keys.Namespace, ev.Keys.Name}
	switch ev.Type {
	case events.TypeTaskRunCreated:
		c, err := events.Decode[events.TaskRunCreated](ev)
		if err != nil {
			return err
		}
		if _, dup := f.uids[c.UID]; dup || c.UID == "" {
			return nil
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
				f.apply(k, st, r)
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

// foldReport applies one device.task.status report; the device is the one
// the subject names (the reader refuses an envelope naming another). It
// returns an error only when the data does not decode.
func (f *taskFold) foldReport(rec events.Record) error {
	st, err := events.Decode[events.TaskStatus](rec.Event)
	if err != nil {
		return err
	}
	r := taskReport{device: rec.Event.Keys.Device, st: st, stored: cmp.Or(rec.Stored, rec.Event.Time)}
	k := trKey{st.Namespace, st.TaskRun}
	if run := f.runs[k]; run != nil && run.uid == st.UID {
		f.apply(k, run, r)
		return nil
	}
	if _, known := f.uids[st.UID]; known || f.deleted[st.UID] || st.UID == "" {
		f.ignored++ // another TaskRun's UID, or a deleted one
		return nil
	}
	if f.earlyCount >= maxEarlyTaskReports {
		f.dropped++
		return nil
	}
	f.early[st.UID] = append(f.early[st.UID], r)
	f.earlyCount++
	return nil
}

// apply folds one report of the TaskRun's current UID.
func (f *taskFold) apply(k trKey, run *taskRunState, r taskReport) {
	switch {
	case r.st.Namespace != k.ns || r.st.TaskRun != k.name || r.st.UID != run.uid,
		!run.isTarget[r.device],
		r.st.Task != "" && r.st.Task != run.task:
		f.ignored++
		return
	}
	switch r.st.Phase {
	case events.TaskPending, events.TaskRunning, events.TaskSucceeded, events.TaskFailed:
	default:
		f.ignored++
		return
	}
	if prev, ok := run.results[r.device]; ok && final(prev.phase) {
		f.ignored++ // a device runs a task once: its result stays
		return
	}
	res := taskResult{phase: r.st.Phase, agentVersion: r.st.AgentVersion, changed: int32(min(len(r.st.Changes), 1<<30)),
		since: cmp.Or(r.st.Since, r.stored)}
	if r.st.Phase == events.TaskFailed {
		res.message = cmp.Or(r.st.Error, "failed (the device gave no error)")
		run.failure = &fleetv1.TaskFailure{Device: r.device, Message: res.message, Time: metav1.NewTime(res.since.UTC().Truncate(time.Second))}
	}
	run.results[r.device] = res
	if s := run.readyStatus(); s != run.ready {
		run.ready, run.readySince = s, r.stored
	}
	f.dirty[k] = true
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
		st.Results = []fleetv1.TaskDeviceResult{}
		for _, t := range run.targets {
			r, ok := run.results[t]
			dr := fleetv1.TaskDeviceResult{Device: t, Phase: events.TaskPending}
			if ok {
				dr.Phase, dr.Message, dr.AgentVersion, dr.ChangedPackages = r.phase, r.message, r.agentVersion, r.changed
				since := metav1.NewTime(r.since.UTC().Truncate(time.Second))
				dr.Since = &since
			}
			st.Results = append(st.Results, dr)
		}
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

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/updater"
)

// Updater is what the agent asks of the root updater (an updater.Client).
type Updater interface {
	// Start asks for task id to run, or for its record when it ran or
	// runs already (a task id never runs twice).
	Start(ctx context.Context, id, task string, agent *events.AgentArtifact) (updater.Response, error)
	// Status returns the record of task id.
	Status(ctx context.Context, id string) (updater.Response, error)
	// Hello tells the updater the running agent's version (the health
	// check of an agent-upgrade).
	Hello(ctx context.Context, version string) error
}

// ErrNoUpdater is the failure of every task on a device whose agent has no
// updater configured.
var ErrNoUpdater = errors.New("no updater configured on this device: install fleet-updater")

// DefaultTaskPoll is how often the agent asks the updater about a running
// task (and retries an updater it could not reach).
const DefaultTaskPoll = 2 * time.Second

// taskRunner runs the intent's tasks one at a time through the updater,
// beside the agent's loop, and reports device.task.status on change.
type taskRunner struct {
	d    *daemon
	log  *slog.Logger
	poll time.Duration
	wake chan struct{}

	mu sync.Mutex // guards the fields below
	// queue holds the tasks waiting to run, in intent order; fresh those
	// of them not reported yet; known every task UID seen (queued,
	// running or done), never run again by this process; last the last
	// status reported per UID.
	queue []events.TaskEntry
	fresh []events.TaskEntry
	known map[string]bool
	last  map[string]events.TaskStatus
}

func newTaskRunner(d *daemon) *taskRunner {
	poll := d.o.TaskPoll
	if poll <= 0 {
		poll = DefaultTaskPoll
	}
	return &taskRunner{d: d, log: d.log, poll: poll, wake: make(chan struct{}, 1),
		known: map[string]bool{}, last: map[string]events.TaskStatus{}}
}

// validateTask checks a task entry as the intent's Deployment entries are
// checked, and its artifact as the updater will: the reason is reported,
// the entry never runs.
func validateTask(e events.TaskEntry) error {
	if err := events.ValidateToken(events.TokenNamespace, e.Namespace); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	if err := events.ValidateToken(events.TokenName, e.TaskRun); err != nil {
		return fmt.Errorf("taskRun: %w", err)
	}
	switch e.Task {
	case events.TaskSystemUpgrade:
		if e.Agent != nil {
			return fmt.Errorf("task %s carries an agent artifact", e.Task)
		}
	case events.TaskAgentUpgrade:
	default:
		return fmt.Errorf("unknown task %q: this agent knows %s and %s", e.Task, events.TaskSystemUpgrade, events.TaskAgentUpgrade)
	}
	if e.Window != nil {
		if err := e.Window.Validate(); err != nil {
			return err
		}
	}
	return updater.Request{V: updater.ProtocolVersion, ID: e.UID, Op: e.Task, Agent: e.Agent}.Validate()
}

// feed takes the intent's tasks: a new valid one is queued (the runner
// reports it, see announce), a new invalid one reported Failed with the
// reason; a queued task no longer on the intent is dropped (one running is
// not interrupted).
func (t *taskRunner) feed(ctx context.Context, tasks []events.TaskEntry) {
	var report []events.TaskStatus
	t.mu.Lock()
	on := map[string]bool{}
	for _, e := range tasks {
		on[e.UID] = true
		if t.known[e.UID] {
			continue
		}
		t.known[e.UID] = true
		if err := validateTask(e); err != nil {
			report = append(report, statusOf(e, events.TaskFailed, "invalid task entry, skipped: "+err.Error()))
			continue
		}
		t.queue = append(t.queue, e)
		t.fresh = append(t.fresh, e)
	}
	t.queue = slices.DeleteFunc(t.queue, func(e events.TaskEntry) bool {
		if on[e.UID] {
			return false
		}
		delete(t.known, e.UID) // it may come back; it never ran
		return true
	})
	t.fresh = slices.DeleteFunc(t.fresh, func(e events.TaskEntry) bool { return !on[e.UID] })
	t.mu.Unlock()
	for _, st := range report {
		t.report(ctx, st)
	}
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

func statusOf(e events.TaskEntry, phase, errText string) events.TaskStatus {
	return events.TaskStatus{Namespace: e.Namespace, TaskRun: e.TaskRun, UID: e.UID, Task: e.Task, Phase: phase, Error: errText}
}

// report publishes a task status when it differs from the last one of its
// UID (the time aside).
func (t *taskRunner) report(ctx context.Context, st events.TaskStatus) {
	t.mu.Lock()
	last, ok := t.last[st.UID]
	st.Since = time.Now().UTC()
	if ok {
		last.Since = st.Since
	}
	same := ok && sameStatus(last, st)
	if !same {
		t.last[st.UID] = st
	}
	t.mu.Unlock()
	if same {
		return
	}
	t.d.report(ctx, events.Keys{Device: t.d.o.Device}, st)
}

func sameStatus(a, b events.TaskStatus) bool {
	return a.Phase == b.Phase && a.Error == b.Error && a.Output == b.Output && a.AgentVersion == b.AgentVersion &&
		slices.Equal(a.Changes, b.Changes) && a.Namespace == b.Namespace && a.TaskRun == b.TaskRun && a.Task == b.Task
}

// announce reports each newly queued task as the updater knows it: its
// record when it ran or runs already (an agent that restarted, or was just
// upgraded, reports the stored result rather than starting over at
// Pending), Pending otherwise. A finished one leaves the queue.
func (t *taskRunner) announce(ctx context.Context) {
	t.mu.Lock()
	fresh := t.fresh
	t.fresh = nil
	t.mu.Unlock()
	for _, e := range fresh {
		st := statusOf(e, events.TaskPending, "")
		if t.d.o.Updater != nil {
			r, err := t.d.o.Updater.Status(ctx, e.UID)
			switch {
			case ctx.Err() != nil:
				return
			case err == nil && r.Done():
				st = finalStatus(e, r)
				t.mu.Lock()
				t.queue = slices.DeleteFunc(t.queue, func(q events.TaskEntry) bool { return q.UID == e.UID })
				t.mu.Unlock()
			case err == nil:
				st.Phase = events.TaskRunning
			}
		}
		t.report(ctx, st)
	}
}

func finalStatus(e events.TaskEntry, r updater.Response) events.TaskStatus {
	st := statusOf(e, r.Phase, r.Error)
	st.Output, st.Changes, st.AgentVersion = r.Output, r.Changes, r.AgentVersion
	return st
}

// run runs queued tasks one at a time until ctx ends, and says hello to
// the updater once the agent is connected to NATS.
func (t *taskRunner) run(ctx context.Context) {
	hello := t.d.o.Updater != nil
	tick := time.NewTicker(t.poll)
	defer tick.Stop()
	for {
		if hello && t.d.o.Conn.Status() == nats.CONNECTED {
			if err := t.d.o.Updater.Hello(ctx, t.d.o.AgentVersion); err == nil {
				hello = false
				t.log.InfoContext(ctx, "told the updater this agent's version", "version", t.d.o.AgentVersion)
			} else if ctx.Err() == nil {
				t.log.WarnContext(ctx, "hello to the updater; retrying", "error", err)
			}
		}
		t.announce(ctx)
		e, next, waiting := t.next()
		for _, st := range waiting {
			t.report(ctx, st)
		}
		if next {
			t.runOne(ctx, e)
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-t.wake:
		case <-tick.C:
		}
	}
}

// next takes the first queued task that may start now: one without a
// maintenance window, one whose window is open in the device's local time,
// or one the updater already runs (a started task is followed to its end,
// whatever the time). The others stay queued, reported Pending with when
// their window opens; each poll looks again, so a device that was offline
// during a window runs the task in its next one.
func (t *taskRunner) next() (events.TaskEntry, bool, []events.TaskStatus) {
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	var waiting []events.TaskStatus
	for i, e := range t.queue {
		if t.last[e.UID].Phase != events.TaskRunning {
			if opens, wait := windowWait(e.Window, now); wait {
				waiting = append(waiting, statusOf(e, events.TaskPending, windowText(e.Window, opens)))
				continue
			}
		}
		t.queue = slices.Delete(t.queue, i, i+1)
		return e, true, waiting
	}
	return events.TaskEntry{}, false, waiting
}

// now is the device's clock, in its local time zone.
func (t *taskRunner) now() time.Time {
	if t.d.o.Now != nil {
		return t.d.o.Now()
	}
	return time.Now()
}

// runOne asks the updater to run e (or for its record) and follows it to
// its end, reporting each change. An updater that cannot be reached or is
// busy is asked again every poll interval: the task stays Pending.
func (t *taskRunner) runOne(ctx context.Context, e events.TaskEntry) {
	if t.d.o.Updater == nil {
		t.report(ctx, statusOf(e, events.TaskFailed, ErrNoUpdater.Error()))
		return
	}
	started := false
	for {
		var r updater.Response
		var err error
		if started {
			r, err = t.d.o.Updater.Status(ctx, e.UID)
		} else {
			r, err = t.d.o.Updater.Start(ctx, e.UID, e.Task, e.Agent)
		}
		var re *updater.RemoteError
		switch {
		case ctx.Err() != nil:
			return // the agent stops; the next one asks again (same id)
		case err == nil && r.Done():
			t.report(ctx, finalStatus(e, r))
			return
		case err == nil:
			started = true
			t.report(ctx, statusOf(e, events.TaskRunning, ""))
		case errors.Is(err, updater.ErrBusy):
			t.report(ctx, statusOf(e, events.TaskPending, "waiting: the updater runs another task"))
		case errors.Is(err, updater.ErrUnknownTask):
			// It started, yet the updater has no record: its state was
			// lost. Not asked again: that could run the task twice.
			t.report(ctx, statusOf(e, events.TaskFailed, "the updater has lost the record of this task (its state folder was emptied?); not run again"))
			return
		case errors.As(err, &re):
			t.report(ctx, statusOf(e, events.TaskFailed, err.Error()))
			return
		default:
			t.report(ctx, statusOf(e, events.TaskPending, "updater unreachable, retrying: "+err.Error()))
		}
		tm := time.NewTimer(t.poll)
		select {
		case <-ctx.Done():
			tm.Stop()
			return
		case <-t.wake:
			tm.Stop()
			t.announce(ctx) // tasks that arrived meanwhile
		case <-tm.C:
		}
	}
}

package projections

import (
	"cmp"
	"slices"
	"strings"

	"github.com/nationtech/harmony-fleet/events"
)

// The TaskRun half of the Intent fold: taskrun.created puts the TaskRun's
// task entry into each frozen target's value, taskrun.deleted of the same
// UID takes it out again. Both facts are kept per UID, so a deletion folded
// before its creation (a rebuild never does that, the intent stream is
// ordered; the fold does not depend on it) still wins.

type (
	// TaskEntry is one TaskRun's task in a device's fleet-intent value.
	TaskEntry = events.TaskEntry
)

// taskKey names one TaskRun object: a (namespace, name) and its UID.
type taskKey struct{ ns, name, uid string }

func cmpTaskKey(a, b taskKey) int {
	return cmp.Or(strings.Compare(a.ns, b.ns), strings.Compare(a.name, b.name), strings.Compare(a.uid, b.uid))
}

// intentTask is what the fold knows of one TaskRun UID.
type intentTask struct {
	known   bool // taskrun.created was folded
	entry   TaskEntry
	targets []string // sorted, frozen
	deleted bool
}

func (s *Intent) task(k taskKey) *intentTask {
	t := s.tasks[k]
	if t == nil {
		t = &intentTask{}
		s.tasks[k] = t
	}
	return t
}

// applyTask folds a taskrun.created or taskrun.deleted event; handled is
// false for events of other types.
func (s *Intent) applyTask(p *Payload) (changed []string, handled bool) {
	ev := &p.Event
	switch ev.Type {
	case events.TypeTaskRunCreated:
		d, err := p.TaskRunCreated()
		if err != nil || d.UID == "" || d.TargetChunks > 0 {
			// A chunked creation is folded once assembled
			// (events.RevisionAssembler).
			return nil, true
		}
		t := s.task(taskKey{ev.Keys.Namespace, ev.Keys.Name, d.UID})
		if t.known {
			return nil, true // duplicate
		}
		t.known = true
		t.entry = TaskEntry{Namespace: ev.Keys.Namespace, TaskRun: ev.Keys.Name, UID: d.UID, Task: d.Task, Agent: d.Agent, Window: d.Window}
		t.targets = slices.Clone(d.Targets)
		slices.Sort(t.targets)
		t.targets = slices.Compact(t.targets)
		return s.recomputeTask(taskKey{ev.Keys.Namespace, ev.Keys.Name, d.UID}), true
	case events.TypeTaskRunDeleted:
		d, err := p.TaskRunDeleted()
		if err != nil || d.UID == "" {
			return nil, true
		}
		k := taskKey{ev.Keys.Namespace, ev.Keys.Name, d.UID}
		s.task(k).deleted = true
		return s.recomputeTask(k), true
	}
	return nil, false
}

// recomputeTask sets or removes one TaskRun's entry on each of its targets
// and returns the devices whose value changed.
func (s *Intent) recomputeTask(k taskKey) []string {
	t := s.tasks[k]
	if t == nil || !t.known {
		return nil
	}
	var changed []string
	for _, dev := range t.targets {
		_, has := s.deviceTasks[dev][k]
		switch {
		case t.deleted && has:
			delete(s.deviceTasks[dev], k)
			if len(s.deviceTasks[dev]) == 0 {
				delete(s.deviceTasks, dev)
			}
			changed = append(changed, dev)
		case !t.deleted && !has:
			if s.deviceTasks[dev] == nil {
				s.deviceTasks[dev] = map[taskKey]TaskEntry{}
			}
			s.deviceTasks[dev][k] = t.entry
			changed = append(changed, dev)
		}
	}
	return changed
}

// tasksOf returns a device's task entries sorted by namespace, TaskRun
// name, then UID; nil when it has none.
func (s *Intent) tasksOf(device string) []TaskEntry {
	m := s.deviceTasks[device]
	if len(m) == 0 {
		return nil
	}
	keys := make([]taskKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmpTaskKey)
	out := make([]TaskEntry, 0, len(keys))
	for _, k := range keys {
		out = append(out, m[k])
	}
	return out
}

// intentTaskSnapshot is one TaskRun UID in a snapshot.
type intentTaskSnapshot struct {
	Namespace string     `json:"namespace"`
	Name      string     `json:"name"`
	UID       string     `json:"uid"`
	Known     bool       `json:"known,omitempty"`
	Entry     *TaskEntry `json:"entry,omitempty"`
	Targets   []string   `json:"targets,omitempty"`
	Deleted   bool       `json:"deleted,omitempty"`
}

func (s *Intent) taskSnapshots() []intentTaskSnapshot {
	keys := make([]taskKey, 0, len(s.tasks))
	for k := range s.tasks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmpTaskKey)
	out := make([]intentTaskSnapshot, 0, len(keys))
	for _, k := range keys {
		t := s.tasks[k]
		ts := intentTaskSnapshot{Namespace: k.ns, Name: k.name, UID: k.uid, Known: t.known, Targets: t.targets, Deleted: t.deleted}
		if t.known {
			e := t.entry
			ts.Entry = &e
		}
		out = append(out, ts)
	}
	return out
}

func (s *Intent) restoreTasks(snaps []intentTaskSnapshot) {
	for _, ts := range snaps {
		k := taskKey{ts.Namespace, ts.Name, ts.UID}
		t := s.task(k)
		t.known, t.targets, t.deleted = ts.Known, ts.Targets, ts.Deleted
		if ts.Entry != nil {
			t.entry = *ts.Entry
		}
		s.recomputeTask(k)
	}
}

package history

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// DeviceTimeline is a device's history: the intent it was given (every
// change of its fleet-intent value, and the revisions and TaskRuns that
// targeted it), its workload and task reports, inventory changes, commands
// and their results, who read its logs, in stored order. Heartbeats are
// summarised.
type DeviceTimeline struct {
	Device string `json:"device"`
	// Entries is the timeline.
	Entries []Entry `json:"entries"`
	// Intent is the device's desired state after the last event: its
	// fleet-intent value as the intent projection folds it (empty: no key).
	Intent []events.IntentEntry `json:"intent"`
	// Tasks are the task entries of that value.
	Tasks []events.TaskEntry `json:"tasks,omitempty"`
	// Heartbeats summarises the heartbeats the telemetry stream still holds.
	Heartbeats HeartbeatSummary `json:"heartbeats"`
	// Inventory is the latest inventory report, if any.
	Inventory *events.DeviceInventory `json:"inventory,omitempty"`
	// Degraded are the Deployments the device reports Degraded after the
	// last event (not recovered, not moved on), sorted.
	Degraded []HealthState `json:"degraded"`
	// Containers is the device's last container report (the telemetry
	// stream keeps the last few); nil when it sent none.
	Containers *ContainersSnapshot `json:"containers,omitempty"`
}

// HeartbeatSummary summarises a device's heartbeats. The telemetry stream
// keeps only the last few per device, so First is the oldest one kept, not
// the device's first heartbeat ever.
type HeartbeatSummary struct {
	Count         int       `json:"count"`
	First         time.Time `json:"first,omitzero"`
	Last          time.Time `json:"last,omitzero"`
	AgentVersions []string  `json:"agentVersions"`
	// Uptime is the agent's uptime in the last heartbeat.
	Uptime time.Duration `json:"uptimeNs,omitempty"`
}

// Entry types of a device timeline that are not event types: a change of the
// device's fleet-intent value, as the intent projection derives it from the
// event in the entry.
const (
	// EntryIntentChanged: the device's desired state changed because of
	// the entry's event (a release, a newer revision, a deletion).
	EntryIntentChanged events.Type = "history.intent-changed"
)

// Device returns the timeline of one device. It reads the whole intent and
// rollout streams (a device's desired state is derived from every
// Deployment's events), the device's own report, telemetry and command
// subjects, and who asked to read its logs (device.logs.requested in
// FLEET_AUDIT). Only the Deployments a revision of which names the device as a
// target are folded into the intent projection: the others can never be in
// its desired state. ErrNoEvents when nothing concerns the device.
func (h *History) Device(ctx context.Context, device string) (*DeviceTimeline, error) {
	if err := events.ValidateToken(events.TokenDevice, device); err != nil {
		return nil, fmt.Errorf("history of device: %w", err)
	}
	reads, err := deviceReads(device)
	if err != nil {
		return nil, err
	}
	recs, err := h.collect(ctx, time.Time{}, reads...)
	if err != nil {
		return nil, err
	}
	f := newDeviceFold(h, device)
	f.prepare(recs)
	for _, rec := range recs {
		f.add(ctx, rec)
	}
	if len(f.tl.Entries) == 0 && !f.relevant {
		return nil, fmt.Errorf("%w for device %s: no intent targets it and it never reported (subjects fleet.report.%s.*, fleet.command.%s): check the device id",
			ErrNoEvents, device, device, device)
	}
	if err := f.finishIntent(); err != nil {
		return nil, err
	}
	f.tl.Degraded = f.health.list()
	return f.tl, nil
}

// deviceReads lists the reads of a device timeline: the whole intent and
// rollout streams, the device's report subjects (health and containers
// included), its command subject and its logs requests in FLEET_AUDIT.
func deviceReads(device string) ([]read, error) {
	reads := []read{{filter: filterAllIntent, from: events.FromStart()}, {filter: filterRollouts, from: events.FromStart()}}
	for _, k := range []events.ReportKind{events.ReportWorkload, events.ReportTask, events.ReportCommand, events.ReportHeartbeat, events.ReportInventory,
		events.ReportHealth, events.ReportContainers, events.ReportFetch} {
		subj, err := events.ReportSubject(device, k)
		if err != nil {
			return nil, fmt.Errorf("history of device: %w", err)
		}
		reads = append(reads, read{filter: subj, from: events.FromStart()})
	}
	cmdSubj, err := events.CommandSubject(device)
	if err != nil {
		return nil, fmt.Errorf("history of device: %w", err)
	}
	auditSubj, err := events.DashboardDeviceSubject(device)
	if err != nil {
		return nil, fmt.Errorf("history of device: %w", err)
	}
	// Who read the device's logs or diagnosis (FLEET_AUDIT, ADR 0025); the
	// dashboard's other actions on the device show through the commands
	// they append.
	logsRequested := func(rec events.Record) bool { return rec.Event.Type == events.TypeDeviceLogsRequested }
	return append(reads, read{filter: cmdSubj, from: events.FromStart()},
		read{filter: auditSubj, from: events.FromStart(), keep: logsRequested}), nil
}

// deviceFold builds a device timeline one record at a time.
type deviceFold struct {
	h      *History
	device string
	tl     *DeviceTimeline
	intent *projections.Intent
	// current is the device's desired state so far: "namespace/name" of a
	// Deployment, "task namespace/name" of a TaskRun → what identifies its
	// entry.
	current map[string]desiredEntry
	// relevant is set by a heartbeat or inventory report, which may add no
	// entry but still show the device exists.
	relevant bool
	// chunks assembles chunked revisions (intent stream only).
	chunks events.RevisionAssembler
	// assembled holds what chunks made of each intent record (by
	// sequence), when prepare read them; targeting holds the Deployments
	// a revision of which names the device as a target (nil: every
	// Deployment is folded); revisionNames says, for each revision event
	// that decoded, whether it names the device.
	assembled     map[uint64]assembly
	targeting     map[deploymentKey]bool
	revisionNames map[uint64]bool
	// health keeps the device's Degraded states, by Deployment.
	health *healthFold
}

// assembly is what a RevisionAssembler made of one record.
type assembly struct {
	whole events.Event
	ok    bool
	err   error
}

// deploymentKey is a Deployment's namespace and name, as the intent
// projection keys its events.
type deploymentKey struct{ namespace, name string }

func newDeviceFold(h *History, device string) *deviceFold {
	return &deviceFold{h: h, device: device, intent: projections.NewIntent(), current: map[string]desiredEntry{}, health: newHealthFold(),
		tl: &DeviceTimeline{Device: device, Entries: []Entry{}, Intent: []events.IntentEntry{}, Heartbeats: HeartbeatSummary{AgentVersions: []string{}},
			Degraded: []HealthState{}}}
}

// prepare reads the intent records of recs before the fold: it assembles
// chunked revisions (once, for the fold too) and finds the Deployments a
// revision of which names the device as a target. The intent projection
// keeps each Deployment's state apart, and a device is in a Deployment's
// desired state only through a revision that names it, so the other
// Deployments' events never change the device's value: the fold skips them.
func (f *deviceFold) prepare(recs []events.Record) {
	f.assembled, f.targeting, f.revisionNames = map[uint64]assembly{}, map[deploymentKey]bool{}, map[uint64]bool{}
	for _, rec := range recs {
		if rec.Stream != events.StreamIntent {
			continue
		}
		whole, ok, err := f.chunks.Add(rec.Event)
		f.assembled[rec.Sequence] = assembly{whole: whole, ok: ok, err: err}
		if err != nil || !ok || whole.Type != events.TypeDeploymentRevisionCreated {
			continue
		}
		d, err := events.Decode[events.DeploymentRevisionCreated](whole)
		if err != nil {
			continue
		}
		names := slices.Contains(d.Targets, f.device)
		f.revisionNames[rec.Sequence] = names
		if names {
			f.targeting[deploymentKey{whole.Keys.Namespace, whole.Keys.Name}] = true
		}
	}
}

// add folds one record: it renders the record's entry with the renderer of
// its event family, and appends it unless the renderer drops it (false:
// the event does not concern the device, is summarised, or does not
// decode).
func (f *deviceFold) add(ctx context.Context, rec events.Record) {
	if rec.Stream == events.StreamIntent {
		// A chunk waits for its revision; a revision is read whole, or
		// skipped when its chunks are missing.
		a, read := f.assembled[rec.Sequence]
		if !read {
			a.whole, a.ok, a.err = f.chunks.Add(rec.Event)
		}
		if a.err != nil {
			f.h.skipData(ctx, rec, a.err)
		}
		if !a.ok {
			return
		}
		rec.Event = a.whole
	}
	ev := rec.Event
	e := entryOf(rec)
	var keep bool
	switch {
	case ev.Type == events.TypeDeploymentRevisionCreated:
		keep = f.revisionCreated(ctx, rec, &e)
	case rec.Stream == events.StreamIntent || rec.Stream == events.StreamRollout:
		keep = f.otherIntent(ctx, rec, &e)
	case ev.Type == events.TypeDeviceHeartbeat:
		keep = f.heartbeat(ctx, rec)
	case ev.Type == events.TypeDeviceInventory:
		keep = f.inventory(ctx, rec, &e)
	case ev.Type == events.TypeWorkloadStatus:
		keep = f.workloadStatus(ctx, rec, &e)
	case ev.Type == events.TypeTaskStatus:
		keep = f.taskStatus(ctx, rec, &e)
	case ev.Type == events.TypeAgentCommand:
		keep = f.agentCommand(ctx, rec, &e)
	case ev.Type == events.TypeCommandResult:
		keep = f.commandResult(ctx, rec, &e)
	case isHealth(ev.Type):
		keep = f.healthReport(ctx, rec, &e)
	case ev.Type == events.TypeDeviceContainers:
		keep = f.containers(ctx, rec)
	case ev.Type == events.TypeWorkloadFetch:
		keep = f.fetchReport(ctx, rec, &e)
	case ev.Type == events.TypeDeviceLogsRequested:
		keep = f.logsRequested(ctx, rec, &e)
	default:
		e.Summary, keep = string(ev.Type), true
	}
	if keep {
		f.tl.Entries = append(f.tl.Entries, e)
	}
	if ev.Type == events.TypeDeploymentRevisionCreated || ev.Type == events.TypeDeploymentDeleted {
		f.tl.Entries = append(f.tl.Entries, f.healthSuperseded(rec)...)
	}
}

// applyIntent folds an intent or rollout event into the intent projection,
// adding an intent-changed entry when the device's desired state changes.
// An event of a Deployment no revision of which targets the device is not
// folded: it cannot change the device's desired state.
func (f *deviceFold) applyIntent(rec events.Record) {
	if f.targeting != nil {
		info, _ := rec.Event.Type.Info()
		k := deploymentKey{rec.Event.Keys.Namespace, rec.Event.Keys.Name}
		if (info.Family == events.FamilyDeploymentIntent || info.Family == events.FamilyDeploymentRollout) && !f.targeting[k] {
			return
		}
	}
	if changed := f.intent.Apply(rec.Event); slices.Contains(changed, f.device) {
		f.tl.Entries = append(f.tl.Entries, f.h.intentChange(rec, f.intent, f.device, f.current))
	}
}

// revisionCreated renders a revision that freezes the device as a target.
func (f *deviceFold) revisionCreated(ctx context.Context, rec events.Record, e *Entry) bool {
	f.applyIntent(rec)
	if names, decoded := f.revisionNames[rec.Sequence]; decoded && !names {
		return false // read before the fold: not a target
	}
	d, err := events.Decode[events.DeploymentRevisionCreated](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	if !slices.Contains(d.Targets, f.device) {
		return false
	}
	role := "target"
	if slices.Contains(d.Canaries, f.device) {
		role = "canary"
	}
	e.Generation, e.RevisionID = d.Generation, d.RevisionID
	e.Summary = fmt.Sprintf("%s revision %s (generation %d) freezes it as a %s", e.Deployment, d.RevisionID, d.Generation, role)
	return true
}

// otherIntent renders the other intent and rollout events: only a TaskRun
// that targets the device gets an entry of its own.
func (f *deviceFold) otherIntent(ctx context.Context, rec events.Record, e *Entry) bool {
	f.applyIntent(rec)
	if rec.Event.Type != events.TypeTaskRunCreated {
		return false
	}
	d, err := events.Decode[events.TaskRunCreated](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	if !slices.Contains(d.Targets, f.device) {
		return false
	}
	e.Summary = fmt.Sprintf("TaskRun %s (generation %d) asks it to run %s", e.Deployment, d.Generation, d.Task)
	e.Deployment = ""
	return true
}

// heartbeat adds a heartbeat to the summary; it never gets an entry.
func (f *deviceFold) heartbeat(ctx context.Context, rec events.Record) bool {
	f.relevant = true
	d, err := events.Decode[events.DeviceHeartbeat](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	hb := &f.tl.Heartbeats
	if hb.Count == 0 {
		hb.First = rec.Stored.UTC()
	}
	hb.Count++
	hb.Last, hb.Uptime = rec.Stored.UTC(), d.Uptime
	if !slices.Contains(hb.AgentVersions, d.AgentVersion) {
		hb.AgentVersions = append(hb.AgentVersions, d.AgentVersion)
	}
	return false
}

// inventory renders the first inventory and every change of it.
func (f *deviceFold) inventory(ctx context.Context, rec events.Record, e *Entry) bool {
	f.relevant = true
	d, err := events.Decode[events.DeviceInventory](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	prev := f.tl.Inventory
	f.tl.Inventory = &d
	if prev == nil {
		e.Summary = "inventory: " + inventoryText(d)
		return true
	}
	if diff := inventoryDiff(*prev, d); diff != "" {
		e.Summary = "inventory changed: " + diff
		return true
	}
	return false // unchanged: not a change
}

func (f *deviceFold) workloadStatus(ctx context.Context, rec events.Record, e *Entry) bool {
	d, err := events.Decode[events.WorkloadStatus](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	e.Deployment, e.Generation, e.RevisionID = d.Namespace+"/"+d.Deployment, d.Generation, d.RevisionID
	f.health.moveOn(e.Deployment, d)
	e.Summary = fmt.Sprintf("%s/%s generation %d: %s", d.Namespace, d.Deployment, d.Generation, d.Phase)
	if d.Error != "" {
		e.Summary += ": " + d.Error
	}
	if held, ok := f.intent.Entry(f.device, d.Namespace, d.Deployment); ok && held.Window != nil && held.UID == d.UID && held.Generation == d.Generation {
		e.Summary += windowWaitText(d, rec.Stored)
	}
	return true
}

func (f *deviceFold) taskStatus(ctx context.Context, rec events.Record, e *Entry) bool {
	d, err := events.Decode[events.TaskStatus](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	e.Summary = fmt.Sprintf("TaskRun %s/%s: %s", d.Namespace, d.TaskRun, d.Phase)
	if d.Error != "" {
		e.Summary += ": " + d.Error
	}
	return true
}

func (f *deviceFold) agentCommand(ctx context.Context, rec events.Record, e *Entry) bool {
	d, err := events.Decode[events.AgentCommand](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	e.Summary = fmt.Sprintf("command %s", d.Command)
	if d.RequestedBy != "" {
		e.Summary += " requested by " + d.RequestedBy
	}
	return true
}

func (f *deviceFold) commandResult(ctx context.Context, rec events.Record, e *Entry) bool {
	d, err := events.Decode[events.CommandResult](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	e.Summary = fmt.Sprintf("command %s (%s): ok", d.Command, d.CommandID)
	if !d.OK {
		e.Summary = fmt.Sprintf("command %s (%s) failed: %s", d.Command, d.CommandID, d.Error)
	}
	return true
}

// logsRequested renders who asked to read the device's log or diagnosis
// (device.logs.requested), through what, with which options, and whether
// it was allowed.
func (f *deviceFold) logsRequested(ctx context.Context, rec events.Record, e *Entry) bool {
	d, err := events.Decode[events.DeviceLogsRequested](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	what := "a diagnosis"
	if !d.Diagnose {
		e.Deployment = d.Namespace + "/" + d.Deployment
		what = fmt.Sprintf("the log of %s/%s/%s", d.Namespace, d.Deployment, d.Service)
	}
	if !d.Allowed {
		e.Summary = fmt.Sprintf("%s was refused %s via %s", d.User, what, d.Via)
		if d.Reason != "" {
			e.Summary += ": " + d.Reason
		}
		return true
	}
	e.Summary = fmt.Sprintf("%s read %s via %s", d.User, what, d.Via)
	var opts []string
	if d.Tail > 0 {
		opts = append(opts, fmt.Sprintf("tail %d", d.Tail))
	}
	if !d.Since.IsZero() {
		opts = append(opts, "since "+d.Since.UTC().Format(time.RFC3339))
	}
	if d.Follow {
		opts = append(opts, "follow")
	}
	if len(opts) > 0 {
		e.Summary += " (" + strings.Join(opts, ", ") + ")"
	}
	return true
}

// healthReport renders the device's Degraded or Recovered report of a
// Deployment and keeps its Degraded state. A re-sent copy is marked and
// changes nothing.
func (f *deviceFold) healthReport(ctx context.Context, rec events.Record, e *Entry) bool {
	d, err := events.Decode[events.WorkloadHealth](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	d = d.Clip()
	e.Deployment, e.Generation, e.RevisionID = d.Namespace+"/"+d.Deployment, d.Generation, d.RevisionID
	e.Summary = fmt.Sprintf("%s generation %d %s", e.Deployment, d.Generation, healthText(rec.Event.Type, d))
	if f.health.resent(e.Deployment, rec) {
		e.Summary += " (re-sent)"
		return true
	}
	f.health.apply(e.Deployment, rec, d, e.Summary)
	return true
}

// healthSuperseded ends the device's Degraded state of the Deployment of
// rec (a revision created, the Deployment deleted) when rec supersedes it.
func (f *deviceFold) healthSuperseded(rec events.Record) []Entry {
	dep := rec.Event.Keys.Namespace + "/" + rec.Event.Keys.Name
	if rec.Event.Type == events.TypeDeploymentDeleted {
		return f.health.superseded(rec, dep, nil, "")
	}
	d, err := events.Decode[events.DeploymentRevisionCreated](rec.Event)
	if err != nil {
		return nil // counted where the revision is rendered
	}
	current := func(uid string, gen int64) bool { return uid == d.UID && gen >= d.Generation }
	return f.health.superseded(rec, dep, current, fmt.Sprintf("revision %s (generation %d)", d.RevisionID, d.Generation))
}

// containers keeps the device's latest container report; it never gets an
// entry.
func (f *deviceFold) containers(ctx context.Context, rec events.Record) bool {
	f.relevant = true
	d, err := events.Decode[events.DeviceContainers](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	f.tl.Containers = snapshotOf(rec, d)
	return false
}

// finishIntent sets the timeline's desired state from the device's
// fleet-intent value after the last event.
func (f *deviceFold) finishIntent() error {
	v, ok := f.intent.Value(f.device)
	if !ok {
		return nil
	}
	var di events.DeviceIntent
	if err := json.Unmarshal(v, &di); err != nil {
		return fmt.Errorf("history of device %s: decode intent: %w", f.device, err)
	}
	f.tl.Intent, f.tl.Tasks = di.Deployments, di.Tasks
	return nil
}

// desiredEntry is one entry of a device's desired state: id identifies it
// (a change of id is a change of the entry), text describes it.
type desiredEntry struct{ id, text string }

// intentChange builds the entry for a change of the device's desired state
// caused by rec, and updates current.
func (h *History) intentChange(rec events.Record, intent *projections.Intent, device string, current map[string]desiredEntry) Entry {
	e := entryOf(rec)
	e.Type, e.Device = EntryIntentChanged, device
	next := map[string]desiredEntry{}
	if v, ok := intent.Value(device); ok {
		var di events.DeviceIntent
		if err := json.Unmarshal(v, &di); err == nil {
			for _, en := range di.Deployments {
				next[en.Namespace+"/"+en.Name] = desiredEntry{id: fmt.Sprintf("%s/%d", en.UID, en.Generation),
					text: fmt.Sprintf("generation %d (%s)", en.Generation, en.RevisionID)}
			}
			for _, t := range di.Tasks {
				next["task "+t.Namespace+"/"+t.TaskRun] = desiredEntry{id: t.UID, text: fmt.Sprintf("%s (uid %s)", t.Task, t.UID)}
			}
		}
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(next)) {
		if old, ok := current[k]; !ok || old.id != next[k].id {
			parts = append(parts, fmt.Sprintf("+%s %s", k, next[k].text))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(current)) {
		if _, ok := next[k]; !ok {
			parts = append(parts, "-"+k)
		}
	}
	e.Summary = fmt.Sprintf("intent changed by %s: %s", rec.Event.Type, strings.Join(parts, ", "))
	if len(next) == 0 {
		e.Summary += " (nothing left to run: key deleted)"
	}
	clear(current)
	maps.Copy(current, next)
	return e
}

func inventoryText(d events.DeviceInventory) string {
	s := fmt.Sprintf("%s/%s kernel %s agent %s", d.OS, d.Arch, d.Kernel, d.AgentVersion)
	if len(d.Labels) > 0 {
		s += " labels " + labelsText(d.Labels)
	}
	return s
}

func labelsText(l map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(l)) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

func inventoryDiff(a, b events.DeviceInventory) string {
	var parts []string
	field := func(name, x, y string) {
		if x != y {
			parts = append(parts, fmt.Sprintf("%s %s → %s", name, x, y))
		}
	}
	field("os", a.OS, b.OS)
	field("arch", a.Arch, b.Arch)
	field("kernel", a.Kernel, b.Kernel)
	field("agent", a.AgentVersion, b.AgentVersion)
	field("labels", labelsText(a.Labels), labelsText(b.Labels))
	return strings.Join(parts, "; ")
}

package history

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// DeploymentTimeline is a Deployment's history: its revisions with their
// frozen sets and per-device results, and every intent event, rollout
// transition and workload report, in stored order.
type DeploymentTimeline struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Revisions in the order they were created.
	Revisions []Revision `json:"revisions"`
	// Entries is the timeline.
	Entries []Entry `json:"entries"`
	// State is the rollout state after the last event; nil when no revision
	// was ever created.
	State *RolloutState `json:"state,omitempty"`
	// Degraded are the devices that report the current revision Degraded
	// after the last event (not recovered, not moved on), sorted.
	Degraded []HealthState `json:"degraded"`
}

// Revision is one revision of a Deployment.
type Revision struct {
	UID         string `json:"uid"`
	Generation  int64  `json:"generation"`
	RevisionID  string `json:"revisionId"`
	ScoreDigest string `json:"scoreDigest"`
	// Targets and Canaries are the frozen sets, sorted.
	Targets  []string `json:"targets"`
	Canaries []string `json:"canaries"`
	// Created is when the revision event was stored; ID is its id.
	Created time.Time `json:"created"`
	ID      string    `json:"id"`
	// Results has one row per target: its latest report of this revision.
	Results []DeviceResult `json:"results"`
}

// DeviceResult is a target's latest report of one revision (the last one
// in stream order, as the rollout projection keeps it).
type DeviceResult struct {
	Device string `json:"device"`
	Canary bool   `json:"canary,omitempty"`
	// Phase is empty when the device never reported this revision.
	Phase    events.WorkloadPhase `json:"phase,omitempty"`
	Error    string               `json:"error,omitempty"`
	Since    time.Time            `json:"since,omitzero"`
	ReportID string               `json:"reportId,omitempty"`
	// Reports counts the device's reports of this revision.
	Reports int `json:"reports"`
}

// Deployment returns the timeline of Deployment namespace/name. It reads the
// Deployment's intent and rollout subjects and the workload and health
// reports stored since its first intent event (the reports stream is shared
// by every Deployment, so that part is a scan). ErrNoEvents when the Deployment has
// no intent event.
func (h *History) Deployment(ctx context.Context, namespace, name string) (*DeploymentTimeline, error) {
	recs, decoded, err := h.deploymentRecords(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	f := newDeploymentFold(h, namespace, name)
	f.decoded = decoded
	f.tl.Entries = make([]Entry, 0, len(recs))
	for _, rec := range recs {
		f.add(ctx, rec)
	}
	return f.finish(), nil
}

// decodedReports are the data of the device reports a Deployment's read
// kept, decoded by the read (by sequence in the reports stream).
type decodedReports struct {
	workload map[uint64]events.WorkloadStatus
	health   map[uint64]events.WorkloadHealth
}

// deploymentRecords reads the Deployment's intent subject, then its rollout
// subject and its workload and health reports stored since its first
// intent event, and returns them merged in stored order, with the reports'
// data decoded.
func (h *History) deploymentRecords(ctx context.Context, namespace, name string) ([]events.Record, decodedReports, error) {
	decoded := decodedReports{workload: map[uint64]events.WorkloadStatus{}, health: map[uint64]events.WorkloadHealth{}}
	intentSubj, err := events.DeploymentIntentSubject(namespace, name)
	if err != nil {
		return nil, decoded, fmt.Errorf("history of Deployment: %w", err)
	}
	rolloutSubj, err := events.DeploymentRolloutSubject(namespace, name)
	if err != nil {
		return nil, decoded, fmt.Errorf("history of Deployment: %w", err)
	}
	intent, err := h.collect(ctx, time.Time{}, read{filter: intentSubj, from: events.FromStart()})
	if err != nil {
		return nil, decoded, err
	}
	if len(intent) == 0 {
		return nil, decoded, fmt.Errorf("%w for Deployment %s/%s (subject %s in %s): check the namespace and name (fleet history fleet --at <time> lists every Deployment)",
			ErrNoEvents, namespace, name, intentSubj, events.StreamIntent)
	}
	rest, err := h.collect(ctx, time.Time{},
		read{filter: rolloutSubj, from: events.FromStart()},
		read{filter: filterWorkload, from: events.FromTime(intent[0].Stored), keep: func(rec events.Record) bool {
			k, d, ok := workloadKey(rec)
			if !ok {
				_, err := events.Decode[events.WorkloadStatus](rec.Event)
				h.skipData(ctx, rec, err)
			}
			if !ok || k.Namespace != namespace || k.Name != name {
				return false
			}
			decoded.workload[rec.Sequence] = d
			return true
		}},
		read{filter: filterHealth, from: events.FromTime(intent[0].Stored), keep: func(rec events.Record) bool {
			k, d, ok := healthKey(rec)
			if !ok {
				_, err := events.Decode[events.WorkloadHealth](rec.Event)
				h.skipData(ctx, rec, err)
			}
			if !ok || k.Namespace != namespace || k.Name != name {
				return false
			}
			decoded.health[rec.Sequence] = d
			return true
		}})
	if err != nil {
		return nil, decoded, err
	}
	return mergeSorted(intent, rest), decoded, nil
}

// revKey identifies a revision: its uid and generation.
type revKey [2]string

func revKeyOf(uid string, gen int64) revKey { return revKey{uid, fmt.Sprint(gen)} }

// deploymentFold builds a Deployment timeline one record at a time, folding
// the rollout projection alongside, in place: a report costs O(1) whatever
// the number of targets.
type deploymentFold struct {
	h               *History
	namespace, name string
	tl              *DeploymentTimeline
	revs            map[revKey]*revisionResults
	// pending keeps reports seen before their revision event (streams are
	// stored independently) until it comes.
	pending map[revKey][]events.Record
	// ro is the rollout projection, folded in place (Rollout.Fold): no
	// copy of it is kept, so an entry takes what it shows of the state
	// before its event from ro before folding it.
	ro projections.Rollout
	// chunks assembles chunked revisions (intent stream only).
	chunks events.RevisionAssembler
	// decoded holds the data of the reports read, decoded by their read.
	decoded decodedReports
	// health keeps the devices' Degraded states, by device.
	health *healthFold
}

// revisionResults is a revision and the index of its targets' rows in
// its Results.
type revisionResults struct {
	rv    *Revision
	index map[string]int
}

func newDeploymentFold(h *History, namespace, name string) *deploymentFold {
	return &deploymentFold{h: h, namespace: namespace, name: name, revs: map[revKey]*revisionResults{}, pending: map[revKey][]events.Record{},
		health: newHealthFold(), tl: &DeploymentTimeline{Namespace: namespace, Name: name, Entries: []Entry{}, Revisions: []Revision{}}}
}

// add renders one record's entry with the renderer of its event family and
// folds the record into the rollout projection. A renderer returns false to
// drop the record: its data does not decode, so the projection ignores it
// too and it is not folded. A renderer sees the projection before the
// record; the entry's stage is the one after it.
func (f *deploymentFold) add(ctx context.Context, rec events.Record) {
	e := entryOf(rec)
	e.Deployment = f.namespace + "/" + f.name
	chunks := 0
	if rec.Stream == events.StreamIntent {
		// A chunk is listed and kept for its revision; a revision is
		// folded whole, or skipped when its chunks are missing.
		if d, err := events.Decode[events.DeploymentRevisionCreated](rec.Event); err == nil {
			chunks = d.TargetChunks
		}
		whole, ok, err := f.chunks.Add(rec.Event)
		if err != nil {
			f.h.skipData(ctx, rec, err)
			return
		}
		rec.Event = whole
		if !ok {
			renderTargetChunk(rec, &e)
			f.tl.Entries = append(f.tl.Entries, e)
			return
		}
	}
	keep := true
	switch rec.Event.Type {
	case events.TypeDeploymentRevisionCreated:
		keep = f.revisionCreated(ctx, rec, &e, chunks)
	case events.TypeDeploymentRevisionTargets:
		renderTargetChunk(rec, &e)
	case events.TypeDeploymentDeleted:
		renderDeleted(rec, &e)
	case events.TypeWorkloadStatus:
		keep = f.workloadStatus(rec, &e)
	case events.TypeWorkloadDegraded, events.TypeWorkloadRecovered:
		keep = f.healthReport(rec, &e)
	default:
		if info, ok := rec.Event.Type.Info(); ok && info.Family == events.FamilyDeploymentRollout {
			keep = f.transition(ctx, rec, &e)
		}
	}
	if !keep {
		return // does not decode: the projection ignores it too
	}
	f.ro.Fold(rec.Event)
	if e.Summary == "" {
		e.Summary = string(rec.Event.Type)
	}
	e.Stage = f.ro.Stage
	f.tl.Entries = append(f.tl.Entries, e)
	f.tl.Entries = append(f.tl.Entries, f.health.supersededIn(rec, e.Deployment, f.ro)...)
}

// revisionCreated renders a revision and records it, with the reports that
// came before it.
func (f *deploymentFold) revisionCreated(ctx context.Context, rec events.Record, e *Entry, chunks int) bool {
	d, err := events.Decode[events.DeploymentRevisionCreated](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	e.Generation, e.RevisionID = d.Generation, d.RevisionID
	rv := &Revision{UID: d.UID, Generation: d.Generation, RevisionID: d.RevisionID, ScoreDigest: d.ScoreDigest,
		Targets: sortedSet(d.Targets), Canaries: sortedSet(d.Canaries), Created: rec.Stored.UTC(), ID: rec.Event.ID.String()}
	e.Summary = fmt.Sprintf("revision %s created (generation %d, uid %s): %d targets %s, %d canaries %s",
		d.RevisionID, d.Generation, d.UID, len(rv.Targets), list(rv.Targets), len(rv.Canaries), list(rv.Canaries))
	if chunks > 0 {
		e.Summary += fmt.Sprintf(" (from %d target chunk events)", chunks)
	}
	k := revKeyOf(d.UID, d.Generation)
	if f.revs[k] != nil {
		e.Summary += " (duplicate)"
		return true
	}
	rr := &revisionResults{rv: rv, index: make(map[string]int, len(rv.Targets))}
	for i, t := range rv.Targets {
		_, canary := slices.BinarySearch(rv.Canaries, t)
		rv.Results = append(rv.Results, DeviceResult{Device: t, Canary: canary})
		rr.index[t] = i
	}
	f.revs[k] = rr
	f.tl.Revisions = append(f.tl.Revisions, *rv)
	for _, p := range f.pending[k] {
		pd, _ := f.report(p)
		rr.add(p, pd)
	}
	delete(f.pending, k)
	return true
}

// renderTargetChunk renders a chunk of a revision's targets.
func renderTargetChunk(rec events.Record, e *Entry) {
	if d, err := events.Decode[events.DeploymentRevisionTargets](rec.Event); err == nil {
		e.Generation = d.Generation
		e.Summary = fmt.Sprintf("target chunk %d of generation %d: %d targets", d.Chunk, d.Generation, len(d.Targets))
	}
}

// renderDeleted renders the Deployment's deletion.
func renderDeleted(rec events.Record, e *Entry) {
	if d, err := events.Decode[events.DeploymentDeleted](rec.Event); err == nil {
		e.Generation = d.Generation
		e.Summary = fmt.Sprintf("Deployment deleted (uid %s, generation %d): every target removes its workloads", d.UID, d.Generation)
	}
}

// workloadStatus renders a device's report, says whether the projection
// ignores it (f.ro is the projection before the report), and adds it to its
// revision's results (or keeps it until the revision comes).
func (f *deploymentFold) workloadStatus(rec events.Record, e *Entry) bool {
	d, ok := f.report(rec)
	if !ok {
		return false
	}
	e.Generation, e.RevisionID = d.Generation, d.RevisionID
	e.Summary = fmt.Sprintf("%s reports %s of generation %d", rec.Event.Keys.Device, d.Phase, d.Generation)
	if d.Error != "" {
		e.Summary += ": " + d.Error
	}
	dev := rec.Event.Keys.Device
	if f.ro.Window != nil && f.ro.IsCurrent(d.UID, d.Generation) && f.ro.IsTarget(dev) && !f.ro.HandedAt(dev).IsZero() {
		e.Summary += windowWaitText(d, rec.Stored)
	}
	e.Ignored = ignoredReport(f.ro, dev, d)
	f.health.moveOn(rec.Event.Keys.Device, d)
	k := revKeyOf(d.UID, d.Generation)
	if rr := f.revs[k]; rr != nil {
		rr.add(rec, d)
	} else {
		f.pending[k] = append(f.pending[k], rec)
	}
	return true
}

// healthReport renders a device's Degraded or Recovered report, says why
// it does not count (f.ro is the projection before it) and keeps the
// device's Degraded state. A re-sent copy is marked and changes nothing.
func (f *deploymentFold) healthReport(rec events.Record, e *Entry) bool {
	d, ok := f.decoded.health[rec.Sequence]
	if !ok || rec.Stream != events.StreamReports {
		if _, d, ok = healthKey(rec); !ok {
			return false
		}
	}
	renderHealth(f.health, f.ro, rec, d, e)
	return true
}

// renderHealth renders a health report on a Deployment timeline and
// folds it into h (ro: the rollout fold before it). Both Deployment
// folds render with it.
func renderHealth(h *healthFold, ro projections.Rollout, rec events.Record, d events.WorkloadHealth, e *Entry) {
	device := rec.Event.Keys.Device
	e.Generation, e.RevisionID = d.Generation, d.RevisionID
	e.Summary = device + " " + healthText(rec.Event.Type, d)
	e.Ignored = ignoredHealth(ro, device, d)
	if h.resent(device, rec) {
		e.Summary += " (re-sent)"
		return
	}
	if e.Ignored == "" {
		h.apply(device, rec, d, e.Summary)
	}
}

// report returns a workload report's data: decoded when it was read, or
// now.
func (f *deploymentFold) report(rec events.Record) (events.WorkloadStatus, bool) {
	if d, ok := f.decoded.workload[rec.Sequence]; ok && rec.Stream == events.StreamReports {
		return d, true
	}
	_, d, ok := workloadKey(rec)
	return d, ok
}

// transition renders a rollout transition.
func (f *deploymentFold) transition(ctx context.Context, rec events.Record, e *Entry) bool {
	d, err := events.Decode[events.RolloutTransition](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	e.Generation, e.RevisionID = d.Generation, d.RevisionID
	e.Summary = transitionSummary(rec.Event.Type, d)
	return true
}

// finish copies the results gathered on the map's revisions into the list
// and sets the rollout state after the last event.
func (f *deploymentFold) finish() *DeploymentTimeline {
	tl := f.tl
	for i := range tl.Revisions {
		tl.Revisions[i].Results = f.revs[revKeyOf(tl.Revisions[i].UID, tl.Revisions[i].Generation)].rv.Results
	}
	if st, ok := stateOf(f.namespace, f.name, f.ro); ok {
		tl.State = &st
	}
	tl.Degraded = f.health.list()
	return tl
}

// add counts a target's report of the revision and keeps it as the
// target's result: reports come in stream order, so the last one is the
// latest, whatever the device's clock says.
func (rr *revisionResults) add(rec events.Record, d events.WorkloadStatus) {
	i, ok := rr.index[rec.Event.Keys.Device]
	if !ok {
		return // not a frozen target
	}
	r := &rr.rv.Results[i]
	r.Reports++
	r.Phase, r.Error, r.Since, r.ReportID = d.Phase, d.Error, d.Since.UTC(), rec.Event.ID.String()
}

// ignoredReport says why the rollout fold ignores a report ("" when it
// counts), given the fold before it. A report never changes the fold's
// revision or its frozen targets, so they are the same after it.
func ignoredReport(ro projections.Rollout, device string, d events.WorkloadStatus) string {
	switch {
	case ro.IsCurrent(d.UID, d.Generation):
		if !ro.IsTarget(device) {
			return "device is not a frozen target of this revision"
		}
		return ""
	case ro.UID == d.UID && d.Generation < ro.Generation:
		return fmt.Sprintf("report of an older revision (current: generation %d)", ro.Generation)
	}
	return "" // kept for a revision not folded yet
}

func transitionSummary(t events.Type, d events.RolloutTransition) string {
	c := d.Counts
	var s string
	switch t {
	case events.TypeRolloutStarted:
		s = fmt.Sprintf("rollout of %s started", d.RevisionID)
	case events.TypeRolloutCanaryStage:
		if d.Released == nil {
			s = fmt.Sprintf("canary stage: released to all %d canaries (too many to list)", c.Canaries)
		} else {
			s = fmt.Sprintf("canary stage: released to %s", list(d.Released))
		}
	case events.TypeRolloutCanariesConverged:
		s = fmt.Sprintf("all %d canaries converged", c.Canaries)
	case events.TypeRolloutCanaryFailed:
		s = fmt.Sprintf("canary %s failed: %s; release blocked", d.Device, d.Error)
	case events.TypeRolloutReleased:
		s = fmt.Sprintf("released to %s", list(d.Released))
	case events.TypeRolloutSucceeded:
		s = fmt.Sprintf("rollout succeeded: all %d targets converged", c.Total)
	case events.TypeRolloutFailed:
		s = "rollout failed"
		switch {
		case d.Device != "":
			s += fmt.Sprintf(": %s: %s", d.Device, d.Error)
		case d.Error != "":
			s += ": " + d.Error
		}
	case events.TypeRolloutTargetRemoved:
		s = fmt.Sprintf("target %s removed: %s", d.Device, d.Error)
		if d.Follow {
			// A Follow Deployment's departure (ADR 0026): the device
			// loses the revision, and its agent removes the workload.
			s = fmt.Sprintf("target %s left, its workload is removed: %s", d.Device, d.Error)
		}
	case events.TypeRolloutTargetAdded:
		if d.HandedGeneration > 0 && d.Reason == projections.ReasonFailedBeforeHanded {
			// A follower that joined before the failure and was never
			// handed the revision (ADR 0026).
			s = fmt.Sprintf("follower %s was never handed revision %s before its rollout failed: handed generation %d (%s), the last whose rollout succeeded",
				d.Device, d.RevisionID, d.HandedGeneration, d.HandedRevisionID)
			break
		}
		s = fmt.Sprintf("target %s joined after the freeze: %s", d.Device, d.Reason)
		if d.Change != "" {
			s += ": " + d.Change
		}
		switch {
		case d.Batch > 0 && d.BudgetGroup != "":
			s += fmt.Sprintf("; in batch %d, budget group %s", d.Batch, d.BudgetGroup)
		case d.Batch > 0:
			s += fmt.Sprintf("; in batch %d", d.Batch)
		}
		if d.HandedGeneration > 0 {
			s += fmt.Sprintf("; handed generation %d (%s), the last whose rollout succeeded, as revision %s failed",
				d.HandedGeneration, d.HandedRevisionID, d.RevisionID)
		}
	case events.TypeRolloutBatchStarted:
		if d.Released == nil {
			s = fmt.Sprintf("batch %d started (its devices are in the revision's plan)", d.Batch)
		} else {
			s = fmt.Sprintf("batch %d started: released to %s", d.Batch, list(d.Released))
		}
	case events.TypeRolloutBatchSoaking:
		s = fmt.Sprintf("batch %d met its success threshold; soaking", d.Batch)
	case events.TypeRolloutBatchSucceeded:
		s = fmt.Sprintf("batch %d succeeded", d.Batch)
	case events.TypeRolloutBatchFailed:
		s = fmt.Sprintf("batch %d failed: %s", d.Batch, d.Error)
	case events.TypeRolloutAwaitingApproval:
		s = fmt.Sprintf("batch %d awaits approval", d.Batch)
	case events.TypeRolloutApproved:
		s = fmt.Sprintf("batch %d approved by %s", d.Batch, d.By)
	case events.TypeRolloutPaused:
		if d.By != "" {
			s = "paused by " + d.By
		} else {
			s = "paused: " + d.Error
		}
	case events.TypeRolloutResumed:
		s = "resumed by " + d.By
	case events.TypeRolloutRolledBack:
		if d.Released == nil {
			s = fmt.Sprintf("rolled back to generation %d on every device handed the revision: %s", d.RollbackTo, d.Error)
		} else {
			s = fmt.Sprintf("rolled back to generation %d on %s: %s", d.RollbackTo, list(d.Released), d.Error)
		}
	default:
		s = string(t)
	}
	return s + fmt.Sprintf(" [%d/%d succeeded, %d failed, %d pending]", c.Succeeded, c.Total, c.Failed, c.Pending)
}

func list(s []string) string {
	if len(s) == 0 {
		return "[]"
	}
	const max = 10
	if len(s) > max {
		return "[" + strings.Join(s[:max], " ") + fmt.Sprintf(" …+%d]", len(s)-max)
	}
	return "[" + strings.Join(s, " ") + "]"
}

func sortedSet(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// mergeSorted merges two record lists already in stored order.
func mergeSorted(a, b []events.Record) []events.Record {
	out := make([]events.Record, 0, len(a)+len(b))
	out = append(out, a...)
	out = append(out, b...)
	slices.SortStableFunc(out, compareRecords)
	return out
}

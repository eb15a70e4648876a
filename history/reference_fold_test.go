package history

// This file keeps the Deployment fold as it was before it folded in place
// (commit eab6fc0: a copy of the rollout state per record, the results
// searched linearly): the reference model the in-place fold must match
// byte for byte (TestTheInPlaceFoldRendersWhatTheCopyingFoldRendered).

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// referenceDeployment is Deployment computed by the copying fold.
func (h *History) referenceDeployment(ctx context.Context, namespace, name string) (*DeploymentTimeline, error) {
	recs, _, err := h.deploymentRecords(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	f := newRefDeploymentFold(h, namespace, name)
	for _, rec := range recs {
		f.add(ctx, rec)
	}
	return f.finish(), nil
}

// refDeploymentFold builds a Deployment timeline one record at a time, folding
// the rollout projection alongside.
type refDeploymentFold struct {
	h               *History
	namespace, name string
	tl              *DeploymentTimeline
	revs            map[revKey]*Revision
	// pending keeps reports seen before their revision event (streams are
	// stored independently) until it comes.
	pending map[revKey][]events.Record
	ro      projections.Rollout
	// chunks assembles chunked revisions (intent stream only).
	chunks events.RevisionAssembler
	// health keeps the devices' Degraded states (the same fold as the
	// in-place one: it copies nothing per record).
	health *healthFold
}

func newRefDeploymentFold(h *History, namespace, name string) *refDeploymentFold {
	return &refDeploymentFold{h: h, namespace: namespace, name: name, revs: map[revKey]*Revision{}, pending: map[revKey][]events.Record{}, health: newHealthFold(),
		tl: &DeploymentTimeline{Namespace: namespace, Name: name, Entries: []Entry{}, Revisions: []Revision{}}}
}

// add folds one record into the rollout projection and renders its entry
// with the renderer of its event family. A renderer returns false to drop
// the record; a record whose data does not decode is also undone from the
// projection.
func (f *refDeploymentFold) add(ctx context.Context, rec events.Record) {
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
	before := f.ro
	f.ro = f.ro.Apply(rec.Event)
	keep := true
	switch rec.Event.Type {
	case events.TypeDeploymentRevisionCreated:
		keep = f.revisionCreated(ctx, rec, &e, chunks)
	case events.TypeDeploymentRevisionTargets:
		renderTargetChunk(rec, &e)
	case events.TypeDeploymentDeleted:
		renderDeleted(rec, &e)
	case events.TypeWorkloadStatus:
		keep = f.workloadStatus(rec, before, &e)
		if !keep {
			return // not undone: the projection ignores it too
		}
	case events.TypeWorkloadDegraded, events.TypeWorkloadRecovered:
		_, d, ok := healthKey(rec)
		if !ok {
			return // the projection ignores it too
		}
		renderHealth(f.health, before, rec, d, &e)
	default:
		if info, ok := rec.Event.Type.Info(); ok && info.Family == events.FamilyDeploymentRollout {
			keep = f.transition(ctx, rec, &e)
		}
	}
	if !keep {
		f.ro = before
		return
	}
	if e.Summary == "" {
		e.Summary = string(rec.Event.Type)
	}
	e.Stage = f.ro.Stage
	f.tl.Entries = append(f.tl.Entries, e)
	f.tl.Entries = append(f.tl.Entries, f.health.supersededIn(rec, e.Deployment, f.ro)...)
}

// revisionCreated renders a revision and records it, with the reports that
// came before it.
func (f *refDeploymentFold) revisionCreated(ctx context.Context, rec events.Record, e *Entry, chunks int) bool {
	d, err := events.Decode[events.DeploymentRevisionCreated](rec.Event)
	if err != nil {
		f.h.skipData(ctx, rec, err)
		return false
	}
	e.Generation, e.RevisionID = d.Generation, d.RevisionID
	rv := &Revision{UID: d.UID, Generation: d.Generation, RevisionID: d.RevisionID, ScoreDigest: d.ScoreDigest,
		Targets: sortedSet(d.Targets), Canaries: sortedSet(d.Canaries), Created: rec.Stored.UTC(), ID: rec.Event.ID.String()}
	for _, t := range rv.Targets {
		rv.Results = append(rv.Results, DeviceResult{Device: t, Canary: slices.Contains(rv.Canaries, t)})
	}
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
	f.revs[k] = rv
	f.tl.Revisions = append(f.tl.Revisions, *rv)
	for _, p := range f.pending[k] {
		_, pd, _ := workloadKey(p)
		refAddResult(rv, p, pd)
	}
	delete(f.pending, k)
	return true
}

// workloadStatus renders a device's report, says whether the projection
// ignored it, and adds it to its revision's results (or keeps it until the
// revision comes).
func (f *refDeploymentFold) workloadStatus(rec events.Record, before projections.Rollout, e *Entry) bool {
	_, d, ok := workloadKey(rec)
	if !ok {
		return false
	}
	e.Generation, e.RevisionID = d.Generation, d.RevisionID
	e.Summary = fmt.Sprintf("%s reports %s of generation %d", rec.Event.Keys.Device, d.Phase, d.Generation)
	if d.Error != "" {
		e.Summary += ": " + d.Error
	}
	e.Ignored = refIgnoredReport(before, f.ro, rec.Event.Keys.Device, d)
	f.health.moveOn(rec.Event.Keys.Device, d)
	k := revKeyOf(d.UID, d.Generation)
	if rv := f.revs[k]; rv != nil {
		refAddResult(rv, rec, d)
	} else {
		f.pending[k] = append(f.pending[k], rec)
	}
	return true
}

// transition renders a rollout transition.
func (f *refDeploymentFold) transition(ctx context.Context, rec events.Record, e *Entry) bool {
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
func (f *refDeploymentFold) finish() *DeploymentTimeline {
	tl := f.tl
	for i := range tl.Revisions {
		tl.Revisions[i].Results = f.revs[revKeyOf(tl.Revisions[i].UID, tl.Revisions[i].Generation)].Results
	}
	if st, ok := stateOf(f.namespace, f.name, f.ro); ok {
		tl.State = &st
	}
	tl.Degraded = f.health.list()
	return tl
}

// refAddResult counts a target's report of rv and keeps it as the target's
// result: reports come in stream order, so the last one is the latest,
// whatever the device's clock says.
func refAddResult(rv *Revision, rec events.Record, d events.WorkloadStatus) {
	i := slices.IndexFunc(rv.Results, func(r DeviceResult) bool { return r.Device == rec.Event.Keys.Device })
	if i < 0 {
		return // not a frozen target
	}
	r := &rv.Results[i]
	r.Reports++
	r.Phase, r.Error, r.Since, r.ReportID = d.Phase, d.Error, d.Since.UTC(), rec.Event.ID.String()
}

// refIgnoredReport says why the rollout fold ignored a report ("" when it
// counted), comparing the fold before and after it.
func refIgnoredReport(before, after projections.Rollout, device string, d events.WorkloadStatus) string {
	switch {
	case after.UID == d.UID && after.Generation == d.Generation:
		if !after.IsTarget(device) {
			return "device is not a frozen target of this revision"
		}
		return ""
	case before.UID == d.UID && d.Generation < before.Generation:
		return fmt.Sprintf("report of an older revision (current: generation %d)", before.Generation)
	}
	return "" // kept for a revision not folded yet
}

// referenceDevice is Device with every Deployment folded into the intent
// projection, as it was before the fold skipped those that never target
// the device.
func (h *History) referenceDevice(ctx context.Context, device string) (*DeviceTimeline, error) {
	reads, err := deviceReads(device)
	if err != nil {
		return nil, err
	}
	recs, err := h.collect(ctx, time.Time{}, reads...)
	if err != nil {
		return nil, err
	}
	f := newDeviceFold(h, device)
	for _, rec := range recs {
		f.add(ctx, rec)
	}
	if err := f.finishIntent(); err != nil {
		return nil, err
	}
	f.tl.Degraded = f.health.list()
	return f.tl, nil
}

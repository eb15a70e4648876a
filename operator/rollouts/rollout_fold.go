package rollouts

import (
	"cmp"
	"errors"
	"slices"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// The rollout runner's fold: its state and how one record changes it. No
// I/O here: the runner's loop feeds records in and hands what changed to
// its sinks (rollout_sinks.go) and its state machine's decisions to the
// transition appender.

// depKey names a Deployment.
type depKey struct{ ns, name string }

func cmpKey(a, b depKey) int {
	if a.ns != b.ns {
		if a.ns < b.ns {
			return -1
		}
		return 1
	}
	switch {
	case a.name < b.name:
		return -1
	case a.name > b.name:
		return 1
	}
	return 0
}

// Sources: the streams the runner reads, by index in runnerState.seqs.
const (
	sourceIntent   = 0 // filterDeploymentIntent
	sourceRollouts = 1 // filterRollouts
	sourceReports  = 2 // the workload and health reports
)

// runnerState is the fold, owned by the Run goroutine.
type runnerState struct {
	// seqs is the last folded sequence of each source stream.
	seqs       [3]uint64
	changed    bool // since the last checkpoint
	rollouts   map[depKey]projections.Rollout
	intent     *projections.Intent
	rolloutSeq map[depKey]uint64
	// dirtyKV are the devices whose fleet-intent value may have changed,
	// dirtyStat the Deployments whose status may have: what the sinks
	// write next.
	dirtyKV   map[string]bool
	dirtyStat map[depKey]bool
	// revisedAt is when each Deployment's current revision was stored.
	revisedAt map[depKey]time.Time
	// exceeded are the Deployments whose rollout exceeded its progress
	// deadline when the runner last judged it (progressDeadlines).
	exceeded map[depKey]bool
	// health is each Deployment's degraded devices (ADR 0019), from the
	// health reports of devices that hold the revision they name.
	health map[depKey]*projections.Health
	// fetched is each Deployment's devices that reported a revision's
	// images fetched ahead (fetch_fold.go); fetchDropped counts the fetch
	// reports dropped.
	fetched      map[depKey]map[string]fetchedRev
	fetchDropped int
	// healthDropped counts the health reports dropped once live because
	// the device does not hold the revision they name.
	healthDropped int
	// live is set once every source caught up with its history.
	live bool
	// revisionless counts the rollouts that have reports or transitions but
	// no revision yet. While catching up that is normal (the three streams
	// are read side by side, so a Deployment's reports may come before its
	// revision); once live only a runner that lags another, or a device
	// naming Deployments that do not exist, makes one, and maxRevisionless
	// bounds them.
	revisionless int
	// dropped counts the reports dropped once live because a bound was
	// reached (maxRevisionless, maxEarlyRevisions).
	dropped int
	// chunks assembles chunked revisions from the intent source; refetch,
	// when set, reads a chunked revision's subject again for a revision
	// whose chunks this state has not read (they came before the
	// checkpoint it resumed from).
	chunks  events.RevisionAssembler
	refetch func(rec events.Record) (events.Event, error)
}

func newRunnerState() *runnerState {
	return &runnerState{rollouts: map[depKey]projections.Rollout{}, intent: projections.NewIntent(),
		rolloutSeq: map[depKey]uint64{}, dirtyKV: map[string]bool{}, dirtyStat: map[depKey]bool{}, revisedAt: map[depKey]time.Time{},
		exceeded: map[depKey]bool{}, health: map[depKey]*projections.Health{}}
}

// Bounds on what device reports can add to the runner's state once it is
// live (see runnerState.revisionless). Past them a report costs a decode and
// nothing else: it is dropped. A device that fills them with made-up
// Deployments or revisions can only delay a runner that lags another (its
// own revision's reports and the leading runner's transitions still come).
const (
	// maxRevisionless is how many Deployments without a known revision
	// the runner keeps reports for.
	maxRevisionless = 1024
	// maxEarlyRevisions is how many revisions of one Deployment the runner
	// keeps reports for ahead of the revision it is at.
	maxEarlyRevisions = 8
)

// folded is what folding one record (or passing one that does not decode)
// did. The zero value: nothing (a record the state already covers).
type folded struct {
	// key is the Deployment the record concerns; decide says its rollout
	// may have changed, so the state machine decides again (once live).
	key    depKey
	decide bool
	// skip is a record that does not decode: the position moved past it;
	// the runner counts and logs it.
	skip *events.RecordError
	// dropped is the bound a report was dropped at (empty: none); the
	// runner logs the first drop and counts the rest.
	dropped string
	// health is a health report folded (it decides nothing: the status
	// only).
	health bool
}

// fold applies one record of source.
func (s *runnerState) fold(source int, rec events.Record) folded {
	ev := rec.Event
	if rec.Sequence <= s.seqs[source] {
		return folded{} // already folded (covered by the checkpoint)
	}
	s.seqs[source] = rec.Sequence
	s.changed = true
	var k depKey
	var wd events.WorkloadStatus // sourceReports
	if source == sourceIntent {
		// Only intent subjects carry chunks: the revision is folded whole
		// when it comes after all of its chunks; chunks and orphans alone
		// change nothing.
		whole, ok, err := s.chunks.Add(ev)
		if errors.Is(err, events.ErrChunksMissing) && s.refetch != nil {
			whole, err = s.refetch(rec)
			ok = err == nil
		}
		if err != nil {
			return folded{skip: events.InvalidData(rec, err)}
		}
		if !ok {
			return folded{}
		}
		ev = whole
	}
	// The data decoded once: to route a report and to fold it. The
	// stream's stored time moves the progress clock, never a device's.
	p := projections.NewPayload(ev)
	p.Stored = rec.Stored
	switch source {
	case sourceIntent, sourceRollouts:
		if ev.Type == events.TypeTaskRunCreated || ev.Type == events.TypeTaskRunDeleted {
			// A TaskRun's task entries: the devices' values only, no
			// rollout (the TaskRun runner folds its status).
			for _, d := range s.intent.ApplyPayload(&p) {
				s.dirtyKV[d] = true
			}
			return folded{}
		}
		k = depKey{ev.Keys.Namespace, ev.Keys.Name}
		if source == sourceRollouts && rec.Sequence > s.rolloutSeq[k] {
			s.rolloutSeq[k] = rec.Sequence
		}
		changed := s.intent.ApplyPayload(&p)
		for _, d := range changed {
			s.dirtyKV[d] = true
		}
		if len(changed) > 0 && s.live {
			// The event's own time, as when the runner folds a
			// transition it appended (appended): the same either way.
			// While catching up the reports are read beside the
			// rollouts, so a device's health report may come before
			// the release that handed it the revision: goLive prunes
			// once the intent is whole.
			s.pruneHealth(k, ev.Time)
		}
		if ev.Type == events.TypeDeploymentRevisionCreated {
			s.revisedAt[k] = cmp.Or(rec.Stored, ev.Time)
		}
	case sourceReports:
		// Routed by type before the data is decoded: the source reads
		// the health subject too.
		if ev.Type == events.TypeWorkloadDegraded || ev.Type == events.TypeWorkloadRecovered {
			return s.foldHealth(rec, &p)
		}
		if ev.Type == events.TypeWorkloadFetch {
			return s.foldFetch(rec, &p)
		}
		var err error
		wd, err = p.WorkloadStatus()
		if err != nil {
			// A valid envelope whose data does not decode: skipped like
			// any undecodable record (the position already moved past it).
			return folded{skip: events.InvalidData(rec, err)}
		}
		k = depKey{wd.Namespace, wd.Deployment}
	}
	ro, known := s.rollouts[k]
	if source == sourceReports && s.live {
		if bound := s.bound(ro, known, wd); bound != "" {
			s.dropped++
			return folded{dropped: bound}
		}
	}
	wasRevisionless := ro.UID == ""
	ro.FoldPayload(&p) // the runner's own state: in place, O(1) per report
	s.rollouts[k] = ro
	if h := s.health[k]; h != nil {
		h.Apply(&p) // a report of another revision, Removed, the deletion: the device moved on
	}
	switch {
	case !known && ro.UID == "":
		s.revisionless++
	case known && wasRevisionless && ro.UID != "":
		s.revisionless--
	}
	s.dirtyStat[k] = true
	return folded{key: k, decide: true}
}

// foldHealth folds a device.workload.degraded or .recovered report. Once
// live it is accepted only from a device that holds exactly the revision
// it names (projections.Intent.Holds): a device cannot mark another device,
// or a Deployment it does not run, degraded, and the state is bounded by
// the devices that hold each Deployment (a Deployment keeps its fold once
// a device reported it degraded, for the time it recovered). While catching up the streams are
// read side by side (the release may come after the report), so every
// report is folded and goLive prunes what the intent does not hold.
func (s *runnerState) foldHealth(rec events.Record, p *projections.Payload) folded {
	d, err := p.WorkloadHealth()
	if err != nil {
		return folded{skip: events.InvalidData(rec, err)}
	}
	k := depKey{d.Namespace, d.Deployment}
	dev := p.Event.Keys.Device
	if s.live && !s.intent.Holds(dev, d.Namespace, d.Deployment, d.UID, d.Generation) {
		s.healthDropped++
		return folded{dropped: "health reports from a device that does not hold the revision they name", health: true}
	}
	h := s.health[k]
	if h == nil {
		if p.Event.Type != events.TypeWorkloadDegraded {
			return folded{health: true} // nothing to recover
		}
		h = &projections.Health{}
		s.health[k] = h
	}
	if h.Apply(p) {
		s.dirtyStat[k] = true
	}
	return folded{key: k, health: true}
}

// pruneHealth drops the degraded devices of Deployment k that no longer
// hold the revision they reported (the intent moved them on, or the
// Deployment was deleted), at the stream time at.
func (s *runnerState) pruneHealth(k depKey, at time.Time) {
	h := s.health[k]
	if h == nil {
		return
	}
	if h.Prune(at, func(e projections.DegradedEntry) bool {
		return s.intent.Holds(e.Device, k.ns, k.name, e.UID, e.Generation)
	}) {
		s.dirtyStat[k] = true
	}
}

// bound names the bound a live report about rollout ro (known: the runner
// has one) would pass, or "" when it passes none.
func (s *runnerState) bound(ro projections.Rollout, known bool, wd events.WorkloadStatus) string {
	switch {
	case !known && s.revisionless >= maxRevisionless:
		return "Deployments without a known revision"
	case known && !ro.IsCurrent(wd.UID, wd.Generation) && !ro.HasEarly(wd.UID, wd.Generation) && ro.EarlyRevisions() >= maxEarlyRevisions:
		return "revisions ahead of the one the runner is at"
	}
	return ""
}

// pass moves the position in source past a record that does not decode. A
// record on a Deployment's rollout subject still moves that subject's last
// sequence, which the runner's next append expects: the outcome names that
// Deployment, to decide again (an append that conflicted with the record
// waits for it).
func (s *runnerState) pass(source int, re *events.RecordError) folded {
	seq := re.Sequence
	if seq <= s.seqs[source] {
		return folded{} // already passed (covered by the checkpoint)
	}
	s.seqs[source] = seq
	s.changed = true
	out := folded{skip: re}
	if source != sourceRollouts {
		return out
	}
	ref, err := events.ParseSubject(re.Subject)
	if err != nil || ref.Family != events.FamilyDeploymentRollout {
		return out
	}
	k := depKey{ref.Keys.Namespace, ref.Keys.Name}
	if seq > s.rolloutSeq[k] {
		s.rolloutSeq[k] = seq
	}
	out.key, out.decide = k, true
	return out
}

// appended folds a transition the runner itself appended at seq.
func (s *runnerState) appended(k depKey, seq uint64, ev events.Event) {
	s.rolloutSeq[k] = seq
	ro := s.rollouts[k]
	ro.Fold(ev)
	s.rollouts[k] = ro
	changed := s.intent.Apply(ev)
	for _, d := range changed {
		s.dirtyKV[d] = true
	}
	if len(changed) > 0 {
		s.pruneHealth(k, ev.Time)
	}
	s.dirtyStat[k] = true
}

// sortedKeys returns every Deployment of the fold, sorted.
func (s *runnerState) sortedKeys() []depKey {
	keys := make([]depKey, 0, len(s.rollouts))
	for k := range s.rollouts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmpKey)
	return keys
}

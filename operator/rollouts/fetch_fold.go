package rollouts

import (
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// fetchedRev is the revision whose images a device reported fetched ahead
// of its release (ADR 0027).
type fetchedRev struct {
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
}

// fetchDropReason is the drop of a fetch report from a device its
// revision was not offered to.
const fetchDropReason = "fetch reports from a device not offered the revision they name"

// foldFetch folds a device.workload.fetch report. It is progress only: it
// never moves the rollout (it decides nothing) and only status.prefetched
// reads it. Once live it is accepted only from a device whose value offers
// it the revision to fetch, or holds it already (projections.Intent): a
// device cannot report progress for another device (the subject names the
// reporter) nor for a revision it was not offered. While catching up the
// streams are read side by side, so every Fetched report is kept (bounded
// as revisionless reports are), and prefetched counts only frozen targets
// of the current revision.
func (s *runnerState) foldFetch(rec events.Record, p *projections.Payload) folded {
	d, err := events.Decode[events.WorkloadFetch](p.Event)
	if err != nil {
		return folded{skip: events.InvalidData(rec, err)}
	}
	if d.Phase != events.FetchDone {
		return folded{health: true} // Started and Failed are history only (fleet history)
	}
	k := depKey{d.Namespace, d.Deployment}
	dev := p.Event.Keys.Device
	if s.live && !s.intent.Fetching(dev, d.Namespace, d.Deployment, d.UID, d.Generation) &&
		!s.intent.Holds(dev, d.Namespace, d.Deployment, d.UID, d.Generation) {
		s.fetchDropped++
		return folded{dropped: fetchDropReason, health: true}
	}
	if s.fetched == nil {
		s.fetched = map[depKey]map[string]fetchedRev{}
	}
	m := s.fetched[k]
	if m == nil {
		if len(s.fetched) >= maxRevisionless {
			s.fetchDropped++
			return folded{dropped: fetchDropReason, health: true}
		}
		m = map[string]fetchedRev{}
		s.fetched[k] = m
	}
	rev := fetchedRev{d.UID, d.Generation}
	if m[dev] != rev {
		m[dev] = rev
		s.dirtyStat[k] = true
	}
	return folded{key: k, health: true}
}

// prefetched is status.prefetched of Deployment k: how many frozen targets
// of its current revision reported its images fetched; nil when the
// revision did not ask for prefetch (the status is then as before).
func (s *runnerState) prefetched(k depKey) *int32 {
	ro := s.rollouts[k]
	if ro.UID == "" || !s.intent.Prefetch(k.ns, k.name, ro.UID, ro.Generation) {
		return nil
	}
	var n int32
	for dev, rev := range s.fetched[k] {
		if rev.UID == ro.UID && rev.Generation == ro.Generation && ro.IsTarget(dev) {
			n++
		}
	}
	return &n
}

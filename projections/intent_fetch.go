package projections

import (
	"slices"
	"strings"

	"github.com/nationtech/harmony-fleet/events"
)

// FetchEntry is the fleet-intent value's fetch-ahead entry, defined by the
// event contract.
type FetchEntry = events.FetchEntry

// refetch sets dev's fetch-ahead entry of Deployment k from its live
// revisions (newest first) and reports whether it changed. A device may
// fetch a revision ahead (ADR 0027) when it is the Deployment's newest
// revision, the revision asked for prefetch, froze the device as a target,
// has not been handed to it, was not rolled back, and the device was not
// removed from its accounting. Like the deployment entries, the answer
// depends only on the facts folded, never on their order.
func (s *Intent) refetch(k depKey, revs []*intentRev, dev string) bool {
	var want *FetchEntry
	if len(revs) > 0 {
		r := revs[0]
		_, removed := r.removedAfterN[dev]
		if r.prefetch && r.targets[dev] && !r.handed(dev) && !removed && r.rollbackTo == 0 {
			e := r.entry
			want = &FetchEntry{Namespace: e.Namespace, Name: e.Name, UID: e.UID, Generation: e.Generation,
				RevisionID: e.RevisionID, Score: e.Score, Window: r.fetchWindow}
		}
	}
	cur, has := s.fetch[dev][k]
	switch {
	case want == nil && has:
		delete(s.fetch[dev], k)
		if len(s.fetch[dev]) == 0 {
			delete(s.fetch, dev)
		}
		return true
	case want != nil && (!has || cur.UID != want.UID || cur.Generation != want.Generation):
		if s.fetch == nil {
			s.fetch = map[string]map[depKey]FetchEntry{}
		}
		if s.fetch[dev] == nil {
			s.fetch[dev] = map[depKey]FetchEntry{}
		}
		s.fetch[dev][k] = *want
		return true
	}
	return false
}

// fetchOf returns device's fetch-ahead entries sorted by namespace then
// name; nil when it has none (the value then has no fetch key).
func (s *Intent) fetchOf(device string) []FetchEntry {
	m := s.fetch[device]
	if len(m) == 0 {
		return nil
	}
	out := make([]FetchEntry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b FetchEntry) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Fetching reports whether device's value offers it revision (uid,
// generation) of Deployment namespace/name to fetch ahead. The rollout
// runner counts a device's fetch report only then: a device cannot report
// progress for a revision it was not offered.
func (s *Intent) Fetching(device, namespace, name, uid string, generation int64) bool {
	e, ok := s.fetch[device][depKey{namespace, name}]
	return ok && e.UID == uid && e.Generation == generation
}

// Prefetch reports whether revision (uid, generation) of Deployment
// namespace/name is known and asked for prefetch.
func (s *Intent) Prefetch(namespace, name, uid string, generation int64) bool {
	r := s.deps[depKey{namespace, name}][revKey{uid, generation}]
	return r != nil && r.known && r.prefetch
}

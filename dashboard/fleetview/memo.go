package fleetview

import (
	"context"
	"sync"
	"time"

	"github.com/nationtech/harmony-fleet/history"
)

// memoTTL bounds how long a memoized timeline is served without a change
// having been seen; memoMax bounds how many are kept.
const (
	memoTTL = 30 * time.Second
	memoMax = 64
)

// timelineMemo keeps Deployment timelines between page views (the spec's
// Deployment page polls every three seconds, and a timeline is a replay of
// three streams). An entry is dropped when the change feed names its
// Deployment's page; a read that raced a change is not kept. It is only
// used while the View runs, since only then are the changes seen.
type timelineMemo struct {
	mu      sync.Mutex // guards the fields below
	gen     map[string]uint64
	entries map[string]memoEntry
}

type memoEntry struct {
	tl  *history.DeploymentTimeline
	gen uint64
	at  time.Time
}

func newTimelineMemo() *timelineMemo {
	return &timelineMemo{gen: map[string]uint64{}, entries: map[string]memoEntry{}}
}

// invalidate drops the entries of the Deployment pages named.
func (m *timelineMemo) invalidate(pages []PageRef) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range pages {
		if p.Kind == PageDeployment {
			m.gen[p.Key]++
			delete(m.entries, p.Key)
		}
	}
}

// deployment returns the timeline of namespace/name from the memo, or reads
// it with read and keeps it unless a change of it was seen meanwhile.
func (m *timelineMemo) deployment(ctx context.Context, namespace, name string, now time.Time,
	read func(ctx context.Context, namespace, name string) (*history.DeploymentTimeline, error)) (*history.DeploymentTimeline, error) {
	key := namespace + "/" + name
	m.mu.Lock()
	e, ok := m.entries[key]
	gen := m.gen[key]
	m.mu.Unlock()
	if ok && e.gen == gen && now.Sub(e.at) < memoTTL {
		return e.tl, nil
	}
	tl, err := read(ctx, namespace, name)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.gen[key] == gen {
		if len(m.entries) >= memoMax {
			clear(m.entries)
		}
		m.entries[key] = memoEntry{tl: tl, gen: gen, at: now}
	}
	return tl, nil
}

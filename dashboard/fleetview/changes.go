package fleetview

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// MaxPagesPerChange bounds a Change: when more distinct pages changed
// since the last one, the Change says All instead of listing them.
const MaxPagesPerChange = 256

// hub fans changes out to subscribers, coalescing each subscriber's pending
// pages until it may send again.
type hub struct {
	mu   sync.Mutex // guards subs
	subs map[*subscriber]struct{}
	// onPublish, when set, sees every publish first (the timeline memo).
	onPublish func([]PageRef)
}

// subscriber is one Changes channel's pending set.
type subscriber struct {
	mu      sync.Mutex // guards pending and all
	pending map[PageRef]struct{}
	all     bool
	signal  chan struct{} // capacity 1: something is pending
}

func newHub() *hub { return &hub{subs: map[*subscriber]struct{}{}} }

// publish adds pages to every subscriber's pending set.
func (h *hub) publish(pages ...PageRef) {
	if len(pages) == 0 {
		return
	}
	if h.onPublish != nil {
		h.onPublish(pages)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		s.add(pages)
	}
}

func (s *subscriber) add(pages []PageRef) {
	s.mu.Lock()
	if !s.all {
		for _, p := range pages {
			s.pending[p] = struct{}{}
		}
		if len(s.pending) > MaxPagesPerChange {
			s.all, s.pending = true, map[PageRef]struct{}{}
		}
	}
	s.mu.Unlock()
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

// take empties the pending set into a Change.
func (s *subscriber) take(at time.Time) (Change, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := Change{At: at.UTC(), All: s.all, Pages: make([]PageRef, 0, len(s.pending))}
	for p := range s.pending {
		c.Pages = append(c.Pages, p)
	}
	s.pending, s.all = map[PageRef]struct{}{}, false
	slices.SortFunc(c.Pages, func(a, b PageRef) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key)) })
	return c, c.All || len(c.Pages) > 0
}

// subscribe returns a channel of coalesced changes, at most one per
// interval, closed when ctx ends.
func (h *hub) subscribe(ctx context.Context, interval time.Duration, now func() time.Time) <-chan Change {
	s := &subscriber{pending: map[PageRef]struct{}{}, signal: make(chan struct{}, 1)}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	out := make(chan Change)
	go func() {
		defer close(out)
		defer func() {
			h.mu.Lock()
			delete(h.subs, s)
			h.mu.Unlock()
		}()
		var last time.Time
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.signal:
			}
			if !last.IsZero() {
				if wait := interval - time.Since(last); wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-ctx.Done():
						t.Stop()
						return
					case <-t.C:
					}
				}
			}
			c, ok := s.take(now())
			if !ok {
				continue
			}
			select {
			case out <- c:
				last = time.Now()
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// Changes implements Source.
func (v *View) Changes(ctx context.Context) <-chan Change {
	return v.hub.subscribe(ctx, time.Second/time.Duration(v.o.MaxChangeRate), v.o.Now)
}

// pagesOfRecord says which pages a stored event affects. The device is the
// one its subject names (the record decoded, so its keys are the
// subject's).
func pagesOfRecord(rec events.Record) []PageRef {
	ev := rec.Event
	k := ev.Keys
	dep := k.Namespace + "/" + k.Name
	switch ev.Type {
	case events.TypeDeploymentRevisionCreated, events.TypeDeploymentRevisionTargets, events.TypeDeploymentDeleted:
		return []PageRef{{Kind: PageDeployment, Key: dep}, {Kind: PageDeployments}, {Kind: PageOverview}}
	case events.TypeTaskRunCreated, events.TypeTaskRunDeleted:
		return []PageRef{{Kind: PageTaskRun, Key: dep}, {Kind: PageTaskRuns}, {Kind: PageOverview}}
	case events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanariesConverged, events.TypeRolloutCanaryFailed,
		events.TypeRolloutReleased, events.TypeRolloutSucceeded, events.TypeRolloutFailed, events.TypeRolloutTargetRemoved, events.TypeRolloutTargetAdded,
		events.TypeRolloutBatchStarted, events.TypeRolloutBatchSoaking, events.TypeRolloutBatchSucceeded, events.TypeRolloutBatchFailed,
		events.TypeRolloutAwaitingApproval, events.TypeRolloutApproved, events.TypeRolloutPaused, events.TypeRolloutResumed,
		events.TypeRolloutRolledBack:
		return []PageRef{{Kind: PageDeployment, Key: dep}, {Kind: PageDeployments}, {Kind: PageOverview}, {Kind: PageAlerts}}
	case events.TypeDeviceHeartbeat:
		// Only the trend: a fleet heartbeats all the time, and a device's
		// liveness changes reach its page through the informer (the
		// operator patches the Device).
		return []PageRef{{Kind: PageTrend}}
	case events.TypeDeviceInventory:
		return []PageRef{{Kind: PageDevice, Key: k.Device}}
	case events.TypeWorkloadStatus:
		p := []PageRef{{Kind: PageDevice, Key: k.Device}, {Kind: PageTrend}}
		if ws, err := events.Decode[events.WorkloadStatus](ev); err == nil && validKey(ws.Namespace, ws.Deployment) {
			p = append(p, PageRef{Kind: PageDeployment, Key: ws.Namespace + "/" + ws.Deployment})
		}
		return p
	case events.TypeTaskStatus:
		p := []PageRef{{Kind: PageDevice, Key: k.Device}, {Kind: PageTrend}}
		if ts, err := events.Decode[events.TaskStatus](ev); err == nil && validKey(ts.Namespace, ts.TaskRun) {
			p = append(p, PageRef{Kind: PageTaskRun, Key: ts.Namespace + "/" + ts.TaskRun})
		}
		return p
	case events.TypeWorkloadDegraded, events.TypeWorkloadRecovered:
		// The Deployment's Degraded condition and the alerts come with the
		// operator's patch (the informer).
		p := []PageRef{{Kind: PageDevice, Key: k.Device}}
		if h, err := events.Decode[events.WorkloadHealth](ev); err == nil && validKey(h.Namespace, h.Deployment) {
			p = append(p, PageRef{Kind: PageDeployment, Key: h.Namespace + "/" + h.Deployment})
		}
		return p
	case events.TypeDeviceContainers:
		return []PageRef{{Kind: PageDevice, Key: k.Device}}
	case events.TypeCommandResult, events.TypeAgentCommand:
		return []PageRef{{Kind: PageDevice, Key: k.Device}, {Kind: PageTrend}}
	}
	return nil
}

// validKey reports whether a namespace and name a device wrote are valid
// tokens, so a page key built from them is one a page can have.
func validKey(namespace, name string) bool {
	return events.ValidateToken(events.TokenNamespace, namespace) == nil && events.ValidateToken(events.TokenName, name) == nil
}

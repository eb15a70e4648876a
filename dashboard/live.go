package dashboard

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
)

// feed fans the view's changes out to the open live-update streams.
type feed struct {
	mu sync.Mutex
	// subs are the open streams' channels; guarded by mu.
	subs map[chan fleetview.Change]struct{}
}

func newFeed() *feed { return &feed{subs: map[chan fleetview.Change]struct{}{}} }

func (f *feed) subscribe() (chan fleetview.Change, func()) {
	ch := make(chan fleetview.Change, 1)
	f.mu.Lock()
	f.subs[ch] = struct{}{}
	f.mu.Unlock()
	return ch, func() {
		f.mu.Lock()
		delete(f.subs, ch)
		f.mu.Unlock()
	}
}

// publish hands c to every stream; a stream that has not taken the
// previous change gets the two merged, so a slow reader misses nothing.
func (f *feed) publish(c fleetview.Change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs {
		select {
		case ch <- c:
		default:
			select {
			case old := <-ch:
				c = merge(old, c)
			default:
			}
			ch <- c
		}
	}
}

func merge(a, b fleetview.Change) fleetview.Change {
	out := fleetview.Change{At: b.At, All: a.All || b.All, Pages: append([]fleetview.PageRef(nil), a.Pages...)}
	for _, p := range b.Pages {
		if !a.Affects(p) {
			out.Pages = append(out.Pages, p)
		}
	}
	return out
}

// handleLive is the live-update stream of one page (server-sent events):
// ?page=<kind>&key=<key>. It sends "change" when the page's data changed;
// static/live.js then reloads the page's live region. Pages work without
// it: each has a Refresh link, and a page with a running rollout refreshes
// itself every three seconds when JavaScript is off.
func (s *Server) handleLive(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	want := fleetview.PageRef{Kind: fleetview.PageKind(r.URL.Query().Get("page")), Key: r.URL.Query().Get("key")}
	ch, done := s.feed.subscribe()
	defer done()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 3000\n: connected\n\n")
	fl.Flush()
	tick := time.NewTicker(s.o.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		case c := <-ch:
			if !affects(c, want) {
				continue
			}
			fmt.Fprintf(w, "event: change\ndata: %d\n\n", c.At.UnixMilli())
			fl.Flush()
		}
	}
}

// affects reports whether change c concerns page p: the page itself, or
// for a list the kind of its items.
func affects(c fleetview.Change, p fleetview.PageRef) bool {
	if c.Affects(p) {
		return true
	}
	for _, q := range c.Pages {
		switch {
		case p.Kind == fleetview.PageOverview:
			return true
		case p.Kind == fleetview.PageDevices && q.Kind == fleetview.PageDevice,
			p.Kind == fleetview.PageDeployments && q.Kind == fleetview.PageDeployment,
			p.Kind == fleetview.PageTaskRuns && q.Kind == fleetview.PageTaskRun,
			p.Kind == fleetview.PageAlerts:
			return true
		}
	}
	return false
}

package agent

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Maintenance windows (ADR 0029): a TaskRun's task starts, a Deployment's
// revision is switched to, and a prefetch revision's images are fetched
// only inside the daily window the intent entry carries, read in the
// device's local time (Options.Now). One evaluation (windowWait) and one
// text (windowText) serve the three.

// windowWait reports whether something with window w must wait at now (the
// device's clock, in its local time zone), and when the window opens next.
// No window, or one that does not parse, never waits: the entry's own
// check refuses a bad window.
func windowWait(w *events.MaintenanceWindow, now time.Time) (opens time.Time, wait bool) {
	if w == nil {
		return time.Time{}, false
	}
	open, next, err := w.Open(now)
	if err != nil || open {
		return time.Time{}, false
	}
	return next, true
}

// windowText is what a Pending report of something waiting for window w,
// opening at opens, says.
func windowText(w *events.MaintenanceWindow, opens time.Time) string {
	return fmt.Sprintf("waiting for the maintenance window (%s, device local time): it opens at %s", w, opens.Format("2006-01-02 15:04 MST"))
}

// windowWatch wakes a pass when a window something waits for opens (or
// its next opening moves): it looks at the clock every poll, which costs
// no I/O, while the passes themselves run only on a change. Keys are
// "deploy/<ns>/<name>" for a switch and "fetch/<ns>/<name>" for a fetch.
type windowWatch struct {
	mu    sync.Mutex
	waits map[string]windowWaiting
}

type windowWaiting struct {
	w     *events.MaintenanceWindow
	opens time.Time
}

// note records that key waits for w, opening at opens.
func (ww *windowWatch) note(key string, w *events.MaintenanceWindow, opens time.Time) {
	ww.mu.Lock()
	defer ww.mu.Unlock()
	if ww.waits == nil {
		ww.waits = map[string]windowWaiting{}
	}
	ww.waits[key] = windowWaiting{w: w, opens: opens}
}

// forget drops every wait whose key starts with prefix.
func (ww *windowWatch) forget(prefix string) {
	ww.mu.Lock()
	defer ww.mu.Unlock()
	for k := range ww.waits {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			delete(ww.waits, k)
		}
	}
}

// due reports whether a window something waits for opened by now, or
// its next opening moved.
func (ww *windowWatch) due(now time.Time) bool {
	ww.mu.Lock()
	defer ww.mu.Unlock()
	for _, w := range ww.waits {
		opens, wait := windowWait(w.w, now)
		if !wait || !opens.Equal(w.opens) {
			return true
		}
	}
	return false
}

// run pokes a pass every poll while a window something waits for is due,
// until ctx ends.
func (ww *windowWatch) run(ctx context.Context, poll time.Duration, now func() time.Time, poke func()) {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if ww.due(now()) {
				poke()
			}
		}
	}
}

// switchWait reports whether the device must wait for e's maintenance
// window before it switches to e's revision: e has a window, it is closed
// at the device's local time, the device runs no container of the
// revision yet and this agent reported nothing of the revision but a
// wait (a switch that began inside the window runs to its end, also after
// an agent restart). A waiting Deployment is reported Pending with when
// its window opens; what the device runs keeps running. An error: the
// window does not parse (the revision cannot be applied).
func (d *daemon) switchWait(ctx context.Context, e events.IntentEntry) (bool, error) {
	if e.Window == nil {
		return false, nil
	}
	if err := e.Window.Validate(); err != nil {
		return false, &PreflightError{Reason: "the revision's maintenance window: " + err.Error(), Err: err}
	}
	if d.began(e) {
		return false, nil
	}
	if held, err := d.o.Reconciler.holdsRevision(ctx, e); err != nil || held {
		return false, nil // Apply meets the engine's error and reports it
	}
	now := d.clock()
	opens, wait := windowWait(e.Window, now)
	if !wait {
		return false, nil
	}
	d.windows.note("deploy/"+e.Namespace+"/"+e.Name, e.Window, opens)
	opensUTC := opens.UTC()
	d.publishStatus(ctx, e, events.WorkloadStatus{Namespace: e.Namespace, Deployment: e.Name, UID: e.UID, Generation: e.Generation,
		RevisionID: e.RevisionID, Phase: events.WorkloadPending, Error: windowText(e.Window, opens), Since: now.UTC(), WindowOpens: &opensUTC})
	return true, nil
}

// began reports whether this agent reported e's revision other than
// waiting for its window: it started switching to it.
func (d *daemon) began(e events.IntentEntry) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	last, ok := d.reported[[2]string{e.Namespace, e.Name}]
	return ok && last.UID == e.UID && last.Generation == e.Generation && last.RevisionID == e.RevisionID && last.WindowOpens == nil
}

// holdsRevision reports whether the runtime has a container of this
// device's Deployment of e's revision (its UID and generation).
func (r *Reconciler) holdsRevision(ctx context.Context, e events.IntentEntry) (bool, error) {
	_, mine, err := r.containers(ctx, e.Namespace, e.Name)
	if err != nil {
		return false, err
	}
	gen := strconv.FormatInt(e.Generation, 10)
	for _, c := range mine {
		if c.Labels[LabelUID] == e.UID && c.Labels[LabelGeneration] == gen {
			return true, nil
		}
	}
	return false, nil
}

package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/score"
)

// WatchSpec is what the monitor needs to watch one revision of a
// Deployment the pass applied (Reconciler.Watched). It holds the secret
// values of the revision, for redaction only: never log it.
type WatchSpec struct {
	// Entry is the revision's intent entry, without its score.
	Entry events.IntentEntry
	// Revision is the hash of the resolved score its containers carry
	// (LabelRevision).
	Revision string
	// Init is the init container's name ("" when none); Services are the
	// services' names in the score's order.
	Init     string
	Services []string
	// Checks are the health checks of the services that have one, by
	// service name.
	Checks map[string]runtime.HealthCheck
	// StartedAt is the latest start of the revision's services as the
	// engine reports it (zero when it does not say).
	StartedAt time.Time
	// secrets are the revision's secret values, from the pins.
	secrets []string
	// pulls are the references of the revision's pull secrets (read
	// again, for redaction, when its log is streamed).
	pulls []string
	// starts are the services' last starts, by name.
	starts map[string]time.Time
	// found are the revision's service containers as inspected once it
	// applied: the monitor's baseline (restart counts, OOM flags), so
	// that a death right after the report counts.
	found []runtime.Container
}

// String never shows the secret values.
func (w WatchSpec) String() string {
	return fmt.Sprintf("WatchSpec{%s/%s revision %s, services %v}", w.Entry.Namespace, w.Entry.Name, w.Revision, w.Services)
}

// GoString never shows the secret values.
func (w WatchSpec) GoString() string { return w.String() }

// key is the Deployment of w.
func (w WatchSpec) key() depKey { return depKey{w.Entry.Namespace, w.Entry.Name} }

// rev is the revision of w.
func (w WatchSpec) rev() healthRev {
	return healthRev{UID: w.Entry.UID, Generation: w.Entry.Generation, RevisionID: w.Entry.RevisionID, Hash: w.Revision}
}

// Watched returns what the monitor watches of entry e once Apply applied
// it: the revision's hash, its services and checks, the latest start of
// its services, and its secret values for redaction. The values come
// from the revision's pins (SecretPins), so the secret source is not read
// again while the pins hold them.
func (r *Reconciler) Watched(ctx context.Context, e events.IntentEntry) (WatchSpec, error) {
	s, err := score.Parse(e.Score)
	if err != nil {
		return WatchSpec{}, fmt.Errorf("watch %s/%s: %w", e.Namespace, e.Name, err)
	}
	res, err := resolve(ctx, s, r.secretsFor(e))
	if err != nil {
		return WatchSpec{}, fmt.Errorf("watch %s/%s: %w", e.Namespace, e.Name, err)
	}
	_, mine, err := r.containers(ctx, e.Namespace, e.Name)
	if err != nil {
		return WatchSpec{}, fmt.Errorf("watch %s/%s: %w", e.Namespace, e.Name, err)
	}
	entry := e
	entry.Score = nil
	w := WatchSpec{Entry: entry, Revision: res.revision, secrets: secretValues(res), Checks: map[string]runtime.HealthCheck{},
		starts: map[string]time.Time{}}
	if res.init != nil {
		w.Init = res.init.Name
	}
	for _, k := range pullKeys(e) {
		if k.secret != "" && !slices.Contains(w.pulls, k.secret) {
			w.pulls = append(w.pulls, k.secret)
		}
	}
	for _, svc := range res.services {
		w.Services = append(w.Services, svc.Name)
		if svc.Healthcheck != nil {
			set := svc.Healthcheck.Settings()
			w.Checks[svc.Name] = runtime.HealthCheck{Command: set.Command, Interval: set.Interval, Timeout: set.Timeout,
				StartPeriod: set.StartPeriod, Retries: set.Retries}
		}
		if c, ok := mine[svc.Name]; ok && c.Labels[LabelRevision] == res.revision {
			if full, err := r.rt().Inspect(ctx, c.ID); err == nil {
				w.found = append(w.found, full)
			}
			w.starts[svc.Name] = c.StartedAt
			if c.StartedAt.After(w.StartedAt) {
				w.StartedAt = c.StartedAt
			}
		}
	}
	return w, nil
}

// expectedStops are the containers the agent itself stops (stopRemove):
// their deaths are not the workload's. Entries are forgotten once seen or
// after expectStopFor.
type expectedStops struct {
	mu  sync.Mutex
	ids map[string]time.Time
}

// expectStopFor bounds how long a stop is expected.
const expectStopFor = 10 * time.Minute

// add expects a stop of the container id.
func (s *expectedStops) add(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.ids == nil {
		s.ids = map[string]time.Time{}
	}
	for k, at := range s.ids {
		if now.Sub(at) > expectStopFor {
			delete(s.ids, k)
		}
	}
	s.ids[id] = now
}

// take reports whether a stop of id was expected, and forgets it.
func (s *expectedStops) take(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	delete(s.ids, id)
	return ok
}

// expected reports whether a stop of id is expected, keeping it.
func (s *expectedStops) expected(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.ids[id]
	return ok
}

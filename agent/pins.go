package agent

import (
	"context"
	"strconv"
	"sync"

	"github.com/nationtech/harmony-fleet/events"
)

// SecretPins keep the secret values a revision was resolved with, so that
// the agent does not watch the secret source: a resync (and any pass that
// repairs drift) re-applies a revision with the values it was first
// resolved with, and a rotated secret reaches the device only with a new
// revision of its Deployment, on reconcile-now (Forget) or when the agent
// restarts (the pins live in memory only). Without pins, every pass would
// re-read the source and a rotated value would replace services outside
// any canary gate. Safe for concurrent use; the zero value is ready.
type SecretPins struct {
	mu sync.Mutex
	// byRevision: revision key (namespace, name, uid, generation,
	// revision id) → "path\x00key" → value.
	byRevision map[string]map[string]string
}

// pinKey names one revision of one Deployment.
func pinKey(e events.IntentEntry) string {
	return e.Namespace + "\x00" + e.Name + "\x00" + e.UID + "\x00" + strconv.FormatInt(e.Generation, 10) + "\x00" + e.RevisionID
}

// For returns the secret source of entry e: values already pinned for e's
// revision are answered from the pins; others are read from src and pinned.
// A failed read pins nothing.
func (p *SecretPins) For(e events.IntentEntry, src Secrets) Secrets {
	if p == nil || src == nil {
		return src
	}
	return pinnedSecrets{p: p, rev: pinKey(e), src: src}
}

// Keep drops the pins of every revision not in entries (revisions replaced
// or Deployments removed from the device's intent).
func (p *SecretPins) Keep(entries []events.IntentEntry) {
	if p == nil {
		return
	}
	keep := make(map[string]bool, len(entries))
	for _, e := range entries {
		keep[pinKey(e)] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for k := range p.byRevision {
		if !keep[k] {
			delete(p.byRevision, k)
		}
	}
}

// Forget drops every pin: the next pass reads every value again
// (reconcile-now).
func (p *SecretPins) Forget() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.byRevision = nil
	p.mu.Unlock()
}

// Len is the number of revisions with pinned values.
func (p *SecretPins) Len() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byRevision)
}

func (p *SecretPins) get(rev, ref string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.byRevision[rev][ref]
	return v, ok
}

func (p *SecretPins) put(rev, ref, v string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byRevision == nil {
		p.byRevision = map[string]map[string]string{}
	}
	if p.byRevision[rev] == nil {
		p.byRevision[rev] = map[string]string{}
	}
	p.byRevision[rev][ref] = v
}

// pinnedSecrets is one revision's view of the pins.
type pinnedSecrets struct {
	p   *SecretPins
	rev string
	src Secrets
}

// Resolve answers from the pins, else reads the source and pins the value.
func (s pinnedSecrets) Resolve(ctx context.Context, path, key string) (string, error) {
	ref := path + "\x00" + key
	if v, ok := s.p.get(s.rev, ref); ok {
		return v, nil
	}
	v, err := s.src.Resolve(ctx, path, key)
	if err != nil {
		return "", err
	}
	s.p.put(s.rev, ref, v)
	return v, nil
}

// secretsFor is the secret source a pass resolves entry e's score from:
// the secret source through the revision's pins (when Pins is set).
func (r *Reconciler) secretsFor(e events.IntentEntry) Secrets {
	return r.Pins.For(e, r.secrets())
}

package agent

import (
	"errors"
	"sync"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/score"
)

// Defaults of PullBackoff.First and PullBackoff.Last.
const (
	DefaultFirstPullRetry = time.Second
	DefaultLastPullRetry  = time.Minute
)

// PullBackoff holds back the pull of an image whose last pull failed (a
// *runtime.PullError): it is not pulled again before First has passed,
// then twice as long after each failure in a row, up to Last. Meanwhile a
// pass that needs the image fails with the last pull's error, unchanged,
// so the Deployment's report does not change and no report is sent; and
// the daemon applies the Deployments that need such an image after the
// others (a stuck pull, which Podman itself retries for seconds, never
// delays another Deployment). A pull that works, the image becoming
// present, and Forget (the reconcile-now command) end the wait. The state
// lives in memory only. Safe for concurrent use; the zero value is ready.
type PullBackoff struct {
	// First is the wait after the first failure (DefaultFirstPullRetry
	// when 0); Last bounds the doubled waits (DefaultLastPullRetry when
	// 0).
	First, Last time.Duration
	// Now is the clock; nil: time.Now.
	Now func() time.Time

	mu sync.Mutex
	// failing holds the images whose last pull failed, by image and pull
	// secret reference.
	failing map[pullKey]pullFailure
}

// pullKey is an image pulled with a pull secret reference ("" when none):
// a Deployment that pulls the same image with another secret is not held
// back by this one's failure.
type pullKey struct{ image, secret string }

// pullFailure is the last failed pull of a key.
type pullFailure struct {
	err      *runtime.PullError
	failures int
	next     time.Time
}

func (b *PullBackoff) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// held returns the last pull error of k while its wait runs.
func (b *PullBackoff) held(k pullKey) (*runtime.PullError, bool) {
	if b == nil {
		return nil, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	f, ok := b.failing[k]
	if !ok || !b.now().Before(f.next) {
		return nil, false
	}
	return f.err, true
}

// pulled records the outcome of a pull of k: a *runtime.PullError starts
// (or doubles) its wait; success ends it. Other errors (a cancelled pull,
// an engine that cannot be reached) say nothing about the registry and
// change nothing.
func (b *PullBackoff) pulled(k pullKey, err error) {
	if b == nil {
		return
	}
	var pe *runtime.PullError
	if err != nil && !errors.As(err, &pe) {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.failing, k)
		return
	}
	first, last := b.First, b.Last
	if first <= 0 {
		first = DefaultFirstPullRetry
	}
	if last <= 0 {
		last = DefaultLastPullRetry
	}
	f := b.failing[k]
	wait := first
	for range f.failures {
		if wait >= last {
			break
		}
		wait *= 2
	}
	if b.failing == nil {
		b.failing = map[pullKey]pullFailure{}
	}
	b.failing[k] = pullFailure{err: pe, failures: f.failures + 1, next: b.now().Add(min(wait, last))}
}

// present forgets the failures of image: it is present now.
func (b *PullBackoff) present(image string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.failing {
		if k.image == image {
			delete(b.failing, k)
		}
	}
}

// Forget ends every wait: the next pass pulls every missing image again.
func (b *PullBackoff) Forget() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	clear(b.failing)
}

// empty reports whether no pull is failing.
func (b *PullBackoff) empty() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.failing) == 0
}

// Failing reports whether a pull e needs failed last time: e needs an
// image whose last pull, with the pull secret e names, failed. Such an
// entry is applied after the others in a pass.
func (b *PullBackoff) Failing(e events.IntentEntry) bool {
	if b.empty() {
		return false
	}
	keys := pullKeys(e)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, k := range keys {
		if _, ok := b.failing[k]; ok {
			return true
		}
	}
	return false
}

// Keep forgets the failures of the images no entry needs any more.
func (b *PullBackoff) Keep(entries []events.IntentEntry) {
	if b.empty() {
		return
	}
	keep := map[pullKey]bool{}
	for _, e := range entries {
		for _, k := range pullKeys(e) {
			keep[k] = true
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for k := range b.failing {
		if !keep[k] {
			delete(b.failing, k)
		}
	}
}

// pullKeys are the images e's score needs, with their pull secrets; none
// when it does not parse.
func pullKeys(e events.IntentEntry) []pullKey {
	s, err := score.Parse(e.Score)
	if err != nil {
		return nil
	}
	svcs := s.Data.Services
	if s.Data.InitContainer != nil {
		svcs = append([]score.Service{*s.Data.InitContainer}, svcs...)
	}
	keys := make([]pullKey, 0, len(svcs))
	for _, svc := range svcs {
		keys = append(keys, pullKey{image: svc.Image, secret: svc.ImagePullSecret})
	}
	return keys
}

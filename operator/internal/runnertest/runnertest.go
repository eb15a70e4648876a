// Package runnertest holds what the tests of the operator's runners (the
// rollout runner, the TaskRun runner) share: a recorder of the statuses a
// runner writes, and a runner started until the test stops it. Only tests
// import it.
package runnertest

import (
	"context"
	"sync"
	"testing"
)

// Statuses keeps the last status of type S a runner wrote of each object
// (namespace/name). The zero value is ready; safe for concurrent use.
type Statuses[S any] struct {
	mu   sync.Mutex
	last map[string]S
}

// Put records st as the last status of namespace/name.
func (s *Statuses[S]) Put(namespace, name string, st S) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last == nil {
		s.last = map[string]S{}
	}
	s.last[namespace+"/"+name] = st
}

// Get is the last status of key (namespace/name), false when none was
// written.
func (s *Statuses[S]) Get(key string) (S, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.last[key]
	return st, ok
}

// Start runs run (a runner's Run) on a context of ctx until the returned
// stop, which cancels it, waits for it and fails t with what it returned
// (name says which runner).
func Start(t testing.TB, ctx context.Context, name string, run func(context.Context) error) (stop func()) {
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(rctx) }()
	return func() {
		rcancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

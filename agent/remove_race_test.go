package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// racingEngine fails the first force-remove of each container as Podman
// does when the container exits (a crash loop) between Podman's look at
// its state and its SIGKILL; a second removal succeeds.
type racingEngine struct {
	runtime.Runtime
	mu     sync.Mutex // guards failed
	failed map[string]bool
}

func (r *racingEngine) Remove(ctx context.Context, id string, force bool) error {
	r.mu.Lock()
	first := !r.failed[id]
	r.failed[id] = true
	r.mu.Unlock()
	if force && first {
		return fmt.Errorf("podman: remove %s: cannot remove container %s as it could not be stopped: sending SIGKILL to container %s: container state improper: stopped", id, id, id)
	}
	return r.Runtime.Remove(ctx, id, force)
}

// TestAContainerThatDiesWhileItIsRemovedIsRemovedAgain: a force-remove
// that raced the container's own death (Podman: "could not be stopped …
// container state improper") is tried again, so a new revision of a
// crash-looping service converges in the same pass instead of failing
// until the next resync (five minutes), and so does a removal. Seen in
// e2e TestTheCrashLoopIsDegradedOnARealPodmanAgent on a loaded machine.
func TestAContainerThatDiesWhileItIsRemovedIsRemovedAgain(t *testing.T) {
	tests := []struct {
		name string
		act  func(w *world) error
	}{
		{"a new revision replaces the containers of the old one", func(w *world) error {
			s := baseScore()
			s.Data.Services[0].Image = "reg.example/api:v2"
			return w.r.Apply(w.ctx, entry(w.t, 2, s))
		}},
		{"a removed Deployment's containers are all removed", func(w *world) error {
			return w.r.Remove(w.ctx, "lab", "analysis")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			if err := w.r.Apply(w.ctx, entry(t, 1, baseScore())); err != nil {
				t.Fatal(err)
			}
			w.r.Runtime = &racingEngine{Runtime: w.rt, failed: map[string]bool{}}
			if err := tt.act(w); err != nil {
				t.Fatalf("a removal that raced a death failed the pass: %v", err)
			}
			all, err := w.rt.List(w.ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range all {
				if c.Labels[agent.LabelGeneration] == "1" {
					t.Errorf("container %s of generation 1 is still there", c.Name)
				}
			}
		})
	}
}

package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// MaxLogLines is how many of the last lines a simulated container keeps
// for Logs; older ones are forgotten (thousands of simulated devices share
// a process).
const MaxLogLines = 1000

// watch is one open Watch call; its fields are guarded by Runtime.mu.
type watch struct {
	labels map[string]string
	ch     chan runtime.ContainerEvent
	// stop unregisters the context.AfterFunc that ends the watch.
	stop func() bool
}

// matches reports whether labels carry every label the watch filters on.
func (w *watch) matches(labels map[string]string) bool {
	for k, v := range w.labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Watch streams the events of the containers carrying every label of
// labels, as runtime.Runtime says: EventStart and EventDied for each Start,
// Exit, Crash, Stop and policy restart, EventHealth for each
// RunHealthCheck (with the status after the check: the simulated engine
// does not lag), EventRemoved for each Remove. Events are delivered while
// the call that causes them holds the runtime's lock, in order. The
// channel is closed when ctx ends (by context.AfterFunc), and after an
// EventLost when the engine goes down (SetUnavailable, Reboot).
func (r *Runtime) Watch(ctx context.Context, labels map[string]string) (<-chan runtime.ContainerEvent, error) {
	if err := r.down("watch"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sim: watch: %w", err)
	}
	w := &watch{labels: maps.Clone(labels), ch: make(chan runtime.ContainerEvent, runtime.WatchBuffer)}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watches[w] = true
	w.stop = context.AfterFunc(ctx, func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.watches[w] {
			delete(r.watches, w)
			close(w.ch)
		}
	})
	return w.ch, nil
}

// emit delivers e about c to every watch whose labels c carries, filling
// in its ID, name and time. The caller holds r.mu.
func (r *Runtime) emit(c *container, e runtime.ContainerEvent) {
	if len(r.watches) == 0 {
		return
	}
	e.ID, e.Name = c.id, c.spec.Name
	if r.now != nil {
		e.Time = r.now()
	}
	for w := range r.watches {
		if w.matches(c.spec.Labels) {
			runtime.Deliver(w.ch, e)
		}
	}
}

// endWatches ends every open watch with an EventLost, as the engine's event
// stream breaks. The caller holds r.mu.
func (r *Runtime) endWatches() {
	for w := range r.watches {
		w.stop()
		lost := runtime.ContainerEvent{Kind: runtime.EventLost}
		if r.now != nil {
			lost.Time = r.now()
		}
		runtime.Deliver(w.ch, lost)
		close(w.ch)
		delete(r.watches, w)
	}
}

// Crash makes a running container's process end by itself with code, as a
// crash does (oom: the kernel's OOM killer ended it, which sets
// OOMKilled for good). An EventDied is delivered; then, when the
// container's restart policy restarts it (always and unless-stopped after
// any exit, on-failure after a non-zero code), it is started again before
// Crash returns: RestartCount grows by one and an EventStart follows.
// runtime.ErrNotFound when the container does not exist; nothing happens
// when it is not running.
func (r *Runtime) Crash(idOrName string, code int, oom bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.lookup(idOrName)
	if err != nil {
		return err
	}
	if c.state != runtime.StateRunning {
		return nil
	}
	if oom {
		c.oomKilled = true
	}
	r.die(c, code)
	if restarts(c.spec.RestartPolicy, code) {
		c.restartCount++
		r.run(c)
	}
	return nil
}

// restarts reports whether a restart policy restarts a container that
// exited by itself with code.
func restarts(policy string, code int) bool {
	switch policy {
	case runtime.RestartAlways, runtime.RestartUnlessStopped:
		return true
	case runtime.RestartOnFailure:
		return code != 0
	default:
		return false
	}
}

// Print appends lines to what a container printed, as if its process
// wrote them now. runtime.ErrNotFound when it does not exist.
func (r *Runtime) Print(idOrName string, lines ...string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.lookup(idOrName)
	if err != nil {
		return err
	}
	c.print(lines...)
	return nil
}

// print appends lines to c's log, each cut at runtime.MaxLogLine bytes,
// keeping the last MaxLogLines. The caller holds the runtime's lock.
func (c *container) print(lines ...string) {
	var at time.Time
	if c.now != nil {
		at = c.now()
	}
	for _, l := range lines {
		c.logs = append(c.logs, l[:min(len(l), runtime.MaxLogLine)])
		c.logAt = append(c.logAt, at)
	}
	c.printed += len(lines)
	if n := len(c.logs); n > MaxLogLines {
		c.logs = slices.Clone(c.logs[n-MaxLogLines:])
		c.logAt = slices.Clone(c.logAt[n-MaxLogLines:])
	}
}

// Logs returns the last tail lines the container printed (its
// Behaviour.Output at each start, and what Print added), oldest first;
// every kept line when tail <= 0. runtime.ErrNotFound when it does not
// exist.
func (r *Runtime) Logs(ctx context.Context, id string, tail int) ([]string, error) {
	if err := r.down("logs"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sim: logs %s: %w", id, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c, err := r.lookup(id)
	if err != nil {
		return nil, err
	}
	lines := c.logs
	if tail > 0 && len(lines) > tail {
		lines = lines[len(lines)-tail:]
	}
	return slices.Clone(lines), nil
}

// ImageDigest is the digest the simulated engine reports for an image
// reference: the digest the reference pins ("…@sha256:…"), otherwise
// "sha256:" and the SHA-256 of the reference, so that another reference is
// another digest.
func ImageDigest(ref string) string {
	if _, digest, ok := strings.Cut(ref, "@"); ok {
		return digest
	}
	sum := sha256.Sum256([]byte(ref))
	return "sha256:" + hex.EncodeToString(sum[:])
}

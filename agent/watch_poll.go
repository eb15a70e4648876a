// The monitor's look at the engine between events: the poll (deaths the
// events did not tell, health checks that are due) and the container
// snapshot it sends.

package agent

import (
	"context"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
)

// owned lists the agent's containers of this device, each inspected:
// only Inspect reports restart counts, OOM kills, image digests and health
// (Podman 4.3's list carries none of them). One that goes between the two
// calls is left out.
func (m *monitor) owned(ctx context.Context) ([]runtime.Container, error) {
	all, err := m.r.rt().List(ctx)
	if err != nil {
		return nil, err
	}
	var out []runtime.Container
	for _, c := range all {
		if !m.r.ownsAny(c) {
			continue
		}
		full, err := m.r.rt().Inspect(ctx, c.ID)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		out = append(out, full)
	}
	return out, nil
}

// pollOnce lists the device's containers: a death the events did not tell
// (a restart count that grew, a newer start of a container last seen
// running, an exit of one last seen running) is counted at now, and every
// state is observed. A health check that is due is run.
func (m *monitor) pollOnce(ctx context.Context, now time.Time) {
	cs, err := m.owned(ctx)
	if err != nil {
		if ctx.Err() == nil {
			m.log.DebugContext(ctx, "list containers for the monitor", "error", err)
		}
		return
	}
	live := map[string]bool{}
	m.mu.Lock()
	// Without events, or after some were lost, a poll's deaths count at
	// once.
	confirmed := m.mode != watchEvents || now.Before(m.fastUntil)
	for _, c := range cs {
		live[c.ID] = true
		s, known := m.seen[c.ID]
		if !known {
			s = m.see(c)
			s.oom = c.OOMKilled // found so: no death of this poll's
			m.pace.changed()
		}
		deaths := 0
		switch {
		case !known:
		case c.RestartCount > s.restarts:
			deaths = c.RestartCount - s.restarts
		case c.StartedAt.After(s.startedAt) && s.state == runtime.StateRunning:
			deaths = 1
		case c.State == runtime.StateExited && s.state == runtime.StateRunning && !m.r.expectStop.expected(c.ID):
			deaths = 1
		}
		if known && (c.State != s.state || c.RestartCount != s.restarts || c.StartedAt != s.startedAt) {
			m.pace.changed()
		}
		if deaths > 0 && !confirmed {
			// Events flow: the died event of a death this poll sees may
			// not be read yet. Counted only if the next poll sees it still
			// untold.
			if seenAs := (polled{c.RestartCount, c.StartedAt, c.State}); s.held != seenAs {
				s.held = seenAs
				m.observeEngine(s, c, now)
				continue
			}
		}
		s.held = polled{}
		for i := range min(deaths, m.eng.rules.restarts+1) {
			oom := i == 0 && c.OOMKilled && !s.oom
			m.death(s, serviceDeath{At: now, ExitCode: c.ExitCode, OOMKilled: oom}, c)
		}
		s.oom = s.oom || c.OOMKilled
		m.observe(s, c, now)
	}
	for id := range m.seen {
		if !live[id] {
			delete(m.seen, id)
			m.pace.changed()
		}
	}
	m.mu.Unlock()
}

// checks runs the health checks that are due (runCheck): those of the
// watched services that run and whose check did not run for
// max(interval, minCheckEvery).
func (m *monitor) checks(ctx context.Context, now time.Time) {
	var due []string
	m.mu.Lock()
	for id, s := range m.seen {
		spec, ok := m.specs[s.key]
		if !ok || spec.Revision != s.hash || s.state != runtime.StateRunning {
			continue
		}
		if hc, ok := spec.Checks[s.service]; ok && now.Sub(s.lastCheck) >= max(hc.Interval, minCheckEvery) {
			s.lastCheck = now
			due = append(due, id)
		}
	}
	m.mu.Unlock()
	for _, id := range due {
		m.runCheck(ctx, id, now)
	}
}

// runCheck runs a container's health check, as the engine's own schedule
// would (without systemd nothing else does), and observes its health.
func (m *monitor) runCheck(ctx context.Context, id string, now time.Time) {
	if err := m.r.rt().RunHealthCheck(ctx, id); err != nil {
		m.log.DebugContext(ctx, "run a health check for the monitor", "container", id, "error", err)
	}
	c, err := m.r.rt().Inspect(ctx, id)
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.seen[id]; ok {
		m.observe(s, c, now)
	}
}

// snapshot sends the device's containers when they changed and the pace
// allows.
func (m *monitor) snapshot(ctx context.Context, now time.Time) {
	if !m.snaps {
		return
	}
	m.mu.Lock()
	due := m.pace.due(now)
	m.mu.Unlock()
	if !due {
		return
	}
	all, err := m.owned(ctx)
	if err != nil {
		m.mu.Lock()
		m.pace.force() // try again
		m.mu.Unlock()
		return
	}
	m.mu.Lock()
	dc := m.containers(all)
	m.mu.Unlock()
	data, err := fitContainers(m.d.o.Device, dc)
	if err != nil {
		m.log.WarnContext(ctx, "container snapshot not sent", "error", err)
		return
	}
	b, _ := marshalData(data)
	m.mu.Lock()
	same := string(b) == string(m.lastSnap)
	if !same {
		m.lastSnap = b
	}
	m.mu.Unlock()
	if !same {
		m.d.report(ctx, events.Keys{Device: m.d.o.Device}, data)
	}
}

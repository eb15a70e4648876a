// The monitor (ADR 0019, A.3): between passes the agent watches what it
// started. One goroutine, started by Run, reads the engine's container
// events (runtime.Runtime.Watch) and polls the engine (List) every
// Options.WatchPoll while events flow, every fastPoll when they cannot be
// had or were lost; it feeds the health engine (healthrules.go), sends the
// Degraded and Recovered reports it decides, ends the settling of revisions
// with minReady (stability.go), and sends the device's container snapshots
// (containers.go).

package agent

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
)

// Defaults of the monitor's schedule.
const (
	// DefaultWatchPoll is how often the monitor lists the containers while
	// the engine's events flow (Options.WatchPoll).
	DefaultWatchPoll = time.Minute
	// fastPoll is how often it lists them when events cannot be had.
	fastPoll = 10 * time.Second
	// lostFastFor is how long the monitor lists every fastPoll after
	// events were lost.
	lostFastFor = time.Minute
	// DefaultHealthTick is how often the monitor applies its rules
	// (Options.HealthTick).
	DefaultHealthTick = time.Second
	// minCheckEvery bounds how often the monitor runs a service's health
	// check itself: at most every max(interval, 30s).
	minCheckEvery = 30 * time.Second
)

// Watch modes (label mode of fleet_agent_watch_mode).
const (
	watchEvents = "events"
	watchPoll   = "poll"
)

// seenContainer is what the monitor last saw of one container.
type seenContainer struct {
	key       depKey
	hash      string
	service   string
	role      string
	policy    string
	restarts  int
	startedAt time.Time
	state     runtime.State
	oom       bool
	lastCheck time.Time
	// held is what a poll saw of a death the events did not tell yet
	// (zero: none).
	held polled
}

// polled is a container's restart count, start and state as a poll saw
// them.
type polled struct {
	restarts  int
	startedAt time.Time
	state     runtime.State
}

// monitor watches the containers of the revisions the passes applied.
type monitor struct {
	d     *daemon
	r     *Reconciler
	now   func() time.Time
	log   *slog.Logger
	dir   string
	poll  time.Duration
	tick  time.Duration
	snaps bool

	mu    sync.Mutex // guards the fields below
	eng   *healthEngine
	specs map[depKey]WatchSpec
	seen  map[string]*seenContainer // by container ID
	// lasts are the last health reports sent, by Deployment, kept to be
	// sent again byte for byte after a reconnect while still Degraded.
	lasts    map[depKey]*nats.Msg
	pace     containersPacer
	lastSnap []byte
	mode     string
	nextPoll time.Time
	// fastUntil: events were lost; the monitor lists every fastPoll until
	// then.
	fastUntil time.Time
	wake      chan struct{}
	// before are the restart counts of the containers found when the
	// agent started (the engine rule without a state file).
	before map[string]int
	// evs are the engine's events (nil: none now; watched again at
	// watchAt).
	evs     <-chan runtime.ContainerEvent
	watchAt time.Time
}

func newMonitor(d *daemon) *monitor {
	now := d.o.Now
	if now == nil {
		now = time.Now
	}
	m := &monitor{d: d, r: d.o.Reconciler, now: now, log: d.log, dir: d.o.StateDir, poll: d.o.WatchPoll,
		tick: d.o.HealthTick, snaps: !d.o.NoContainerReports, specs: map[depKey]WatchSpec{},
		seen: map[string]*seenContainer{}, lasts: map[depKey]*nats.Msg{}, wake: make(chan struct{}, 1)}
	if m.poll <= 0 {
		m.poll = DefaultWatchPoll
	}
	if m.tick <= 0 {
		m.tick = DefaultHealthTick
	}
	m.eng = newHealthEngine(healthRules{restarts: d.o.DegradedRestarts, window: d.o.DegradedWindow}, now())
	st, err := loadHealthState(m.dir)
	switch {
	case err == nil:
		for _, s := range st.Deployments {
			if s.Last != nil {
				msg := nats.NewMsg(s.Last.Subject)
				msg.Data = s.Last.Data
				for k, v := range s.Last.Header {
					msg.Header[k] = v
				}
				m.lasts[s.key()] = msg
			}
		}
	case !errors.Is(err, fs.ErrNotExist):
		m.log.Warn("the health state file cannot be read; deciding from the engine", "error", err)
	}
	m.eng.restore(st, err == nil)
	m.pace.force()
	return m
}

// start watches the engine's events and lists the containers the agent
// finds when it starts, before the first pass creates any: the events of
// that pass are seen, and the containers found are those restarted before
// (the engine rule without a state file). ctx is the monitor's (run).
func (m *monitor) start(ctx context.Context) {
	m.watch(ctx)
	all, err := m.r.rt().List(ctx)
	if err != nil {
		return // none is taken as restarted before
	}
	before := map[string]int{}
	for _, c := range all {
		if !m.r.ownsAny(c) {
			continue
		}
		if full, err := m.r.rt().Inspect(ctx, c.ID); err == nil {
			before[c.ID] = full.RestartCount
		}
	}
	m.mu.Lock()
	m.before = before
	m.mu.Unlock()
}

// watch starts watching the engine's events of the device's containers;
// without them the monitor polls, and tries again at the next fast poll.
func (m *monitor) watch(ctx context.Context) {
	ch, err := m.r.rt().Watch(ctx, map[string]string{LabelOwner: OwnerValue, LabelDevice: m.d.o.Device})
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.evs, m.watchAt = nil, m.now().Add(fastPoll)
		if ctx.Err() == nil {
			m.log.DebugContext(ctx, "container events unavailable; polling", "error", err)
		}
		m.setModeLocked(watchPoll)
		return
	}
	m.evs = ch
	m.setModeLocked(watchEvents)
}

// poke makes the monitor look now.
func (m *monitor) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// track watches spec's revision, reported Converged.
func (m *monitor) track(spec WatchSpec) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.specs[spec.key()] = spec
	m.baseline(spec)
	m.eng.track(spec.key(), spec.rev(), spec.Services, true, m.now())
	m.pace.changed()
	m.nextPoll = time.Time{}
	m.poke()
}

// baseline sees the containers of spec's revision not seen yet, as they
// were when it applied. The caller holds m.mu.
func (m *monitor) baseline(spec WatchSpec) {
	for _, c := range spec.found {
		if _, ok := m.seen[c.ID]; !ok {
			s := m.see(c)
			s.oom = c.OOMKilled
		}
	}
}

// settle watches spec's revision until deadline; the monitor reports it
// Converged then, or Failed at a death before.
func (m *monitor) settle(spec WatchSpec, minReady time.Duration, deadline time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.specs[spec.key()] = spec
	m.baseline(spec)
	m.eng.settle(spec.key(), spec.rev(), spec.Services, spec.starts, minReady, deadline, m.now())
	m.pace.changed()
	m.nextPoll = time.Time{}
	m.poke()
}

// settling reports whether e's revision settles now.
func (m *monitor) settling(e events.IntentEntry) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	spec, ok := m.specs[depKey{e.Namespace, e.Name}]
	return ok && sameRevision(spec.Entry, e) && m.eng.settling(spec.key(), spec.rev())
}

// watching reports whether e's revision is watched (tracked or
// settling).
func (m *monitor) watching(e events.IntentEntry) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	spec, ok := m.specs[depKey{e.Namespace, e.Name}]
	return ok && sameRevision(spec.Entry, e)
}

// untrackOther stops watching e's Deployment when it watches another
// revision of it; untrack(k) stops watching k altogether.
func (m *monitor) untrackOther(e events.IntentEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := depKey{e.Namespace, e.Name}
	if spec, ok := m.specs[k]; ok && !sameRevision(spec.Entry, e) {
		m.forget(k)
	}
}

// keep stops watching every Deployment not in want (gone from the
// intent).
func (m *monitor) keep(want map[[2]string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.specs {
		if !want[[2]string{k.ns, k.name}] {
			m.forget(k)
		}
	}
}

// untrack stops watching k.
func (m *monitor) untrack(k depKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forget(k)
}

// forget drops k. The caller holds m.mu.
func (m *monitor) forget(k depKey) {
	if _, ok := m.specs[k]; !ok {
		return
	}
	delete(m.specs, k)
	delete(m.lasts, k)
	m.eng.untrack(k)
	m.pace.changed()
}

func sameRevision(a, b events.IntentEntry) bool {
	return a.UID == b.UID && a.Generation == b.Generation && a.RevisionID == b.RevisionID
}

// reconnected re-sends, byte for byte, the last report of every
// Deployment still Degraded, and a container snapshot, each unless it
// settled before the connection broke (settle.go).
func (m *monitor) reconnected(ctx context.Context) {
	snap := m.d.unsettled(containersKey)
	m.mu.Lock()
	again := map[string]*nats.Msg{}
	for k, msg := range m.lasts {
		if d, ok := m.eng.deps[k]; ok && d.degraded {
			again[healthKey(k)] = msg
		}
	}
	if snap {
		m.pace.force()
		m.lastSnap = nil // sent again even when unchanged
	}
	m.mu.Unlock()
	for key, msg := range again {
		if m.d.unsettled(key) {
			m.d.resend(ctx, key, msg)
		}
	}
	m.poke()
}

// run watches until ctx ends.
func (m *monitor) run(ctx context.Context) {
	t := time.NewTicker(m.tick)
	defer t.Stop()
	for {
		m.mu.Lock()
		evs, retry := m.evs, m.evs == nil && !m.now().Before(m.watchAt)
		m.mu.Unlock()
		if retry {
			m.watch(ctx)
			m.mu.Lock()
			evs = m.evs
			m.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-evs:
			if !ok {
				m.mu.Lock()
				m.evs, m.watchAt = nil, time.Time{}
				m.setModeLocked(watchPoll)
				m.nextPoll = time.Time{}
				m.mu.Unlock()
				continue
			}
			m.event(ctx, ev)
		case <-t.C:
		case <-m.wake:
		}
		m.step(ctx)
	}
}

// setModeLocked says how the monitor learns of deaths. The caller holds
// m.mu.
func (m *monitor) setModeLocked(mode string) {
	if m.mode != mode && mode == watchPoll {
		m.nextPoll = time.Time{}
	}
	m.mode = mode
	m.d.o.Metrics.watchMode(mode)
}

// step polls when due, applies the rules and sends what they decided.
func (m *monitor) step(ctx context.Context) {
	now := m.now()
	m.mu.Lock()
	due := !now.Before(m.nextPoll)
	if due {
		every := m.poll
		if m.mode != watchEvents || now.Before(m.fastUntil) {
			every = fastPoll
		}
		m.nextPoll = now.Add(every)
	}
	m.mu.Unlock()
	if due {
		m.pollOnce(ctx, now)
	}
	m.checks(ctx, now)
	m.mu.Lock()
	reps := m.eng.decide(now)
	settled := m.eng.settled(now)
	specs := map[depKey]WatchSpec{}
	for _, rep := range reps {
		specs[rep.Key] = m.specs[rep.Key]
	}
	for _, s := range settled {
		specs[s.Key] = m.specs[s.Key]
	}
	coalesced := m.eng.coalesced
	m.eng.coalesced = 0
	m.d.o.Metrics.degraded(m.eng.degradedCount())
	m.mu.Unlock()
	m.d.o.Metrics.healthReports("coalesced", coalesced)

	for _, s := range settled {
		m.settled(ctx, specs[s.Key], s)
	}
	for _, rep := range reps {
		msg := m.d.health(ctx, rep, m.logs(ctx, specs[rep.Key], rep))
		m.mu.Lock()
		if msg != nil {
			m.lasts[rep.Key] = msg
		}
		m.pace.force()
		m.mu.Unlock()
	}
	if len(reps) > 0 {
		m.save(ctx)
	}
	m.snapshot(ctx, now)
	if m.d.o.stepHook != nil {
		m.d.o.stepHook(now)
	}
}

// settled reports the end of a revision's settling.
func (m *monitor) settled(ctx context.Context, spec WatchSpec, s settleResult) {
	if s.Err == nil {
		m.d.status(ctx, spec.Entry, events.WorkloadConverged, "")
		return
	}
	if id := m.containerOf(s.Key, spec.Revision, s.Err.Name); id != "" {
		if lines, err := m.r.rt().Logs(ctx, id, logTail); err == nil {
			s.Err.Output = redactOutput(lines, spec.secrets)
		}
	}
	m.d.unstableRevision(ctx, spec.Entry, s.Err)
}

// save writes the state file; a failure is logged (it is a cache).
func (m *monitor) save(ctx context.Context) {
	m.mu.Lock()
	lasts := map[depKey]*savedMsg{}
	for k, msg := range m.lasts {
		lasts[k] = &savedMsg{Subject: msg.Subject, Header: msg.Header, Data: msg.Data}
	}
	st := m.eng.state(lasts)
	m.mu.Unlock()
	if err := saveHealthState(m.dir, st); err != nil {
		m.log.WarnContext(ctx, "the health state file was not written; an agent restart decides from the engine", "error", err)
	}
}

// logs are the redacted last lines of the services a Degraded report
// names, by service.
func (m *monitor) logs(ctx context.Context, spec WatchSpec, rep healthReport) map[string][]string {
	if !rep.Degraded {
		return nil
	}
	out := map[string][]string{}
	for _, s := range rep.Services {
		id := m.containerOf(rep.Key, spec.Revision, s.Name)
		if id == "" {
			continue
		}
		lines, err := m.r.rt().Logs(ctx, id, logTail)
		if err != nil {
			m.log.DebugContext(ctx, "the logs of a degraded service could not be read", "deployment", rep.Key.String(),
				"service", s.Name, "error", err)
			continue
		}
		out[s.Name] = redactOutput(lines, spec.secrets)
	}
	return out
}

// containerOf is the ID of service name of k's revision hash, "" when
// unknown.
func (m *monitor) containerOf(k depKey, hash, name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, s := range m.seen {
		if s.key == k && s.hash == hash && s.service == name {
			return id
		}
	}
	return ""
}

// event takes one container event.
func (m *monitor) event(ctx context.Context, ev runtime.ContainerEvent) {
	switch ev.Kind {
	case runtime.EventLost:
		m.mu.Lock()
		m.nextPoll, m.fastUntil = time.Time{}, m.now().Add(lostFastFor)
		m.mu.Unlock()
		return
	case runtime.EventRemoved:
		m.mu.Lock()
		delete(m.seen, ev.ID)
		m.pace.changed()
		m.mu.Unlock()
		return
	}
	if ev.Kind == runtime.EventDied && m.r.expectStop.take(ev.ID) {
		m.mu.Lock()
		m.pace.changed()
		m.mu.Unlock()
		return // the agent stopped it
	}
	c, err := m.r.rt().Inspect(ctx, ev.ID)
	if err != nil {
		return // gone already: removed by a pass
	}
	if !m.r.ownsAny(c) {
		return
	}
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pace.changed()
	s := m.see(c)
	if ev.Kind == runtime.EventDied {
		oom := c.OOMKilled && !s.oom
		s.oom = s.oom || c.OOMKilled
		m.death(s, serviceDeath{At: now, ExitCode: ev.ExitCode, OOMKilled: oom}, c)
	}
	m.observe(s, c, now)
	if ev.Kind == runtime.EventDied && c.State == runtime.StateExited && restarts(s.policy, ev.ExitCode != 0) {
		// Its policy restarts it: the restart count it will show then is
		// this death's, not another for a poll to find.
		s.restarts = c.RestartCount + 1
	}
}

// see returns the seen entry of c, made from its labels when new (its
// OOM flag not yet seen: a death being told counts it). The caller holds
// m.mu.
func (m *monitor) see(c runtime.Container) *seenContainer {
	s, ok := m.seen[c.ID]
	if !ok {
		s = &seenContainer{key: depKey{c.Labels[LabelNamespace], c.Labels[LabelDeployment]}, hash: c.Labels[LabelRevision],
			service: c.Name, role: c.Labels[LabelRole], policy: c.Labels[LabelRestartPolicy], restarts: c.RestartCount,
			startedAt: c.StartedAt, state: c.State}
		m.seen[c.ID] = s
	}
	return s
}

// death gives a death of s to the engine, counts it, and pokes a pass
// when the restart policy keeps the service down (the pass reports it
// Failed, as it does today). The caller holds m.mu.
func (m *monitor) death(s *seenContainer, d serviceDeath, c runtime.Container) {
	if s.role != "service" {
		return
	}
	m.eng.died(s.key, s.hash, s.service, d)
	reason := "exit"
	switch {
	case d.OOMKilled:
		reason = "oom"
	case signalOf(d.ExitCode) != "":
		reason = "signal"
	}
	m.d.o.Metrics.containerDied(reason)
	if c.State == runtime.StateExited && !restarts(s.policy, d.ExitCode != 0) {
		if rev, ok := m.eng.tracked(s.key); ok && rev.Hash == s.hash {
			m.d.pokePass()
		}
	}
}

// observe gives the engine c's state. The caller holds m.mu.
func (m *monitor) observe(s *seenContainer, c runtime.Container, now time.Time) {
	s.restarts, s.startedAt, s.state, s.held = c.RestartCount, c.StartedAt, c.State, polled{}
	m.observeEngine(s, c, now)
}

// observeEngine gives the engine c's state, keeping what the monitor saw
// of it. The caller holds m.mu.
func (m *monitor) observeEngine(s *seenContainer, c runtime.Container, now time.Time) {
	if s.role != "service" {
		return
	}
	o := serviceObs{State: string(c.State), RestartsTotal: c.RestartCount, StartedAt: c.StartedAt, RestartedBefore: m.before[c.ID] > 0}
	if c.Health != nil {
		o.Health = c.Health.Status
	}
	m.eng.observe(s.key, s.hash, s.service, o, now)
}

// generationOf parses a generation label (0 when it does not parse).
func generationOf(s string) int64 {
	g, _ := strconv.ParseInt(s, 10, 64)
	return g
}

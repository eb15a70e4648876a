// The monitor's decisions (ADR 0019, A.3): a pure state machine on an
// injected clock. It is fed what the monitor sees of the services of the
// revisions it tracks (deaths, observed state) and says, on decide, which
// Degraded and Recovered reports to send now. It does no I/O and reads no
// clock; the monitor (watch.go) drives it.

package agent

import (
	"slices"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Defaults of the monitor's rules (--degraded-restarts, --degraded-window).
const (
	// DefaultDegradedRestarts is how many deaths of one service within the
	// window make its Deployment Degraded with reason CrashLoop.
	DefaultDegradedRestarts = 3
	// DefaultDegradedWindow is the window deaths are counted in, and the
	// first recovery window.
	DefaultDegradedWindow = 5 * time.Minute
)

// Bounds of the monitor's reports.
const (
	// downAfter is how long a service may stay not running after a death
	// before its Deployment is Degraded with reason Down.
	downAfter = 30 * time.Second
	// maxRecoveryWindow caps the recovery window R = window·2^(k-1).
	maxRecoveryWindow = time.Hour
	// maxDegradedPerHour and maxRecoveredPerHour bound the reports of one
	// Deployment in any hour; a transition past them waits.
	maxDegradedPerHour  = 4
	maxRecoveredPerHour = 3
	// healthTokens is the per-device budget of health reports in any
	// hour; reports past it are coalesced per Deployment and the latest
	// state goes out once the budget frees.
	healthTokens = 32
)

// healthRules are the monitor's bounds.
type healthRules struct {
	// restarts within window make a CrashLoop.
	restarts int
	window   time.Duration
}

func (r healthRules) withDefaults() healthRules {
	if r.restarts <= 0 {
		r.restarts = DefaultDegradedRestarts
	}
	if r.window <= 0 {
		r.window = DefaultDegradedWindow
	}
	return r
}

// depKey is a Deployment on this device.
type depKey struct{ ns, name string }

func (k depKey) String() string { return k.ns + "/" + k.name }

// healthRev is the revision of a Deployment the monitor tracks: the
// intent's identity, and the hash of the resolved score its containers
// carry (LabelRevision).
type healthRev struct {
	UID        string
	Generation int64
	RevisionID string
	Hash       string
}

// serviceObs is a service's container as the engine last showed it.
type serviceObs struct {
	State         string // a runtime.State
	Health        string // runtime.Health* or ""
	RestartsTotal int
	StartedAt     time.Time
	// RestartedBefore: the container had restarted before the agent
	// started (probing).
	RestartedBefore bool
}

// serviceDeath is one death of a service's container.
type serviceDeath struct {
	At        time.Time
	ExitCode  int
	OOMKilled bool
}

// svcHealth is what the engine knows of one service.
type svcHealth struct {
	name     string
	deaths   []serviceDeath // within the window, oldest first
	last     *serviceDeath  // the last death seen
	obs      serviceObs
	observed bool
	// downSince is the time of the death after which the service has not
	// been seen running again; zero while it runs.
	downSince time.Time
}

// depHealth is the state of one tracked revision.
type depHealth struct {
	key      depKey
	rev      healthRev
	services []*svcHealth
	// active: the revision was reported Converged; only then may it
	// degrade (a settling revision fails instead, stability.go).
	active   bool
	degraded bool
	reason   string
	since    time.Time // of the current state
	// k is the number of Degraded reports of the Deployment in the hour
	// before (and including) the current Degraded one.
	k int
	// lastBad is the last time a service died or was seen not running or
	// unhealthy: recovery counts from it.
	lastBad time.Time
	// probing: the agent started without a state file; a service seen
	// with restarts at its first observation makes the revision observed
	// until probeUntil, then decided once.
	probing    bool
	probeUntil time.Time
	// settle is the minReady deadline while the revision settles (zero:
	// not settling); unstable holds the death that failed it.
	settle   time.Time
	minReady time.Duration
	unstable *unstableDeath
}

// healthMark is one Degraded or Recovered report of a Deployment.
type healthMark struct {
	At       time.Time `json:"at"`
	Degraded bool      `json:"degraded"`
}

// healthReport is a Degraded or Recovered report the engine decided.
type healthReport struct {
	Key      depKey
	Rev      healthRev
	Degraded bool
	Reason   string
	Window   time.Duration
	Services []serviceReport
	Since    time.Time
}

// serviceReport is one service named by a report.
type serviceReport struct {
	Name          string
	State         string
	Restarts      int
	RestartsTotal int
	ExitCode      int
	Signal        string
	OOMKilled     bool
	ExitedAt      *time.Time
	Health        string
}

// healthEngine decides. Not safe for concurrent use: the monitor guards it.
type healthEngine struct {
	rules healthRules
	deps  map[depKey]*depHealth
	// marks are the reports of each Deployment in the last hour, across
	// revisions (the per-Deployment bound).
	marks map[depKey][]healthMark
	// bucket is the device's health report budget; pending the reports
	// it held back, one per Deployment (the latest); sent the last report
	// sent of each Deployment.
	bucket  hourBudget
	pending map[depKey]healthReport
	sent    map[depKey]healthReport
	// coalesced counts the reports replaced while pending.
	coalesced int
	// saved are the Deployments of the state file (healthstate.go);
	// noFile: the agent started without one.
	saved  map[depKey]savedHealth
	noFile bool
	// seen are the Deployments tracked since the agent started: only the
	// first revision tracked of each is probed (noFile).
	seen map[depKey]bool
}

func newHealthEngine(rules healthRules, now time.Time) *healthEngine {
	return &healthEngine{rules: rules.withDefaults(), deps: map[depKey]*depHealth{}, marks: map[depKey][]healthMark{},
		bucket:  hourBudget{n: healthTokens},
		pending: map[depKey]healthReport{}, sent: map[depKey]healthReport{}, saved: map[depKey]savedHealth{},
		seen: map[depKey]bool{}}
}

// track starts watching rev of Deployment k with services (in score
// order), reported Converged when active. The same revision keeps its
// state (active only goes from false to true); another revision starts
// over: its Degraded state and deaths are the old revision's, and no
// Recovered is sent for that one.
func (h *healthEngine) track(k depKey, rev healthRev, services []string, active bool, now time.Time) {
	if d, ok := h.deps[k]; ok && d.rev == rev {
		d.active = d.active || active
		return
	}
	h.untrack(k)
	d := &depHealth{key: k, rev: rev, active: active, since: now}
	for _, s := range services {
		d.services = append(d.services, &svcHealth{name: s})
	}
	if s, ok := h.saved[k]; ok && s.rev() == rev && s.Degraded {
		// Degraded before the agent restarted: still Degraded, no new
		// report until it recovers.
		d.degraded, d.reason, d.since, d.k, d.lastBad = true, s.Reason, s.Since, max(s.K, 1), now
		h.sent[k] = healthReport{Key: k, Rev: rev, Degraded: true, Reason: s.Reason, Since: s.Since}
	} else if h.noFile && !h.seen[k] {
		d.probing = true
	}
	delete(h.saved, k)
	h.seen[k] = true
	h.deps[k] = d
}

// untrack forgets Deployment k's revision: another revision replaces it,
// or the Deployment left the device. Its report bound stays.
func (h *healthEngine) untrack(k depKey) {
	delete(h.deps, k)
	delete(h.pending, k)
	delete(h.sent, k)
}

// tracked returns the revision tracked for k.
func (h *healthEngine) tracked(k depKey) (healthRev, bool) {
	d, ok := h.deps[k]
	if !ok {
		return healthRev{}, false
	}
	return d.rev, true
}

// service returns k's service name of revision hash.
func (h *healthEngine) service(k depKey, hash, name string) *svcHealth {
	d, ok := h.deps[k]
	if !ok || d.rev.Hash != hash {
		return nil
	}
	for _, s := range d.services {
		if s.name == name {
			return s
		}
	}
	return nil
}

// died records a death of service name of k's revision hash (a death of
// another revision, or one the agent caused, is not given to it).
func (h *healthEngine) died(k depKey, hash, name string, death serviceDeath) {
	s := h.service(k, hash, name)
	if s == nil {
		return
	}
	d := h.deps[k]
	s.deaths = append(s.deaths, death)
	s.last = &s.deaths[len(s.deaths)-1]
	s.downSince = death.At
	s.obs.State = "exited"
	if death.At.After(d.lastBad) {
		d.lastBad = death.At
	}
	if !d.settle.IsZero() && d.unstable == nil && death.At.Before(d.settle) {
		d.unstable = &unstableDeath{service: name, death: death, startedAt: s.obs.StartedAt, restarts: len(s.deaths)}
	}
}

// observe records a service's container as the engine shows it now.
func (h *healthEngine) observe(k depKey, hash, name string, o serviceObs, now time.Time) {
	s := h.service(k, hash, name)
	if s == nil {
		return
	}
	d := h.deps[k]
	if !s.observed && d.probing && o.RestartedBefore && d.probeUntil.IsZero() {
		d.probeUntil = now.Add(h.rules.window)
	}
	s.observed = true
	s.obs = o
	switch {
	case o.State == "running" && o.Health != "unhealthy":
		s.downSince = time.Time{}
	case o.State == "running":
		s.downSince = time.Time{}
		d.lastBad = now
	default:
		if s.downSince.IsZero() {
			s.downSince = now
		}
		d.lastBad = now
	}
}

// recoveryWindow is R = window·2^(k-1), capped at maxRecoveryWindow.
func (h *healthEngine) recoveryWindow(k int) time.Duration {
	r := h.rules.window
	for i := 1; i < k && r < maxRecoveryWindow; i++ {
		r *= 2
	}
	return min(r, maxRecoveryWindow)
}

// decide applies the rules at now and returns the reports to send now,
// in Deployment order, after the per-Deployment bounds and the device's
// budget.
func (h *healthEngine) decide(now time.Time) []healthReport {
	keys := make([]depKey, 0, len(h.deps))
	for k := range h.deps {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b depKey) int {
		if a.ns != b.ns {
			return cmpString(a.ns, b.ns)
		}
		return cmpString(a.name, b.name)
	})
	for _, k := range keys {
		d := h.deps[k]
		h.prune(d, now)
		if rep, ok := h.transition(d, now); ok {
			h.queue(rep)
		}
	}
	return h.flush(now)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// prune drops deaths older than the window and marks older than an hour.
func (h *healthEngine) prune(d *depHealth, now time.Time) {
	for _, s := range d.services {
		i := 0
		for i < len(s.deaths) && now.Sub(s.deaths[i].At) >= h.rules.window {
			i++
		}
		if i > 0 {
			s.deaths = slices.Delete(s.deaths, 0, i)
			if len(s.deaths) > 0 {
				s.last = &s.deaths[len(s.deaths)-1]
			} else if s.last != nil {
				last := *s.last
				s.last = &last
			}
		}
	}
	m := h.marks[d.key]
	i := 0
	for i < len(m) && now.Sub(m[i].At) >= time.Hour {
		i++
	}
	h.marks[d.key] = m[i:]
}

// count is the number of d's marks of kind degraded in the last hour.
func (h *healthEngine) count(k depKey, degraded bool) int {
	n := 0
	for _, m := range h.marks[k] {
		if m.Degraded == degraded {
			n++
		}
	}
	return n
}

// transition is d's report at now, if its state changes.
func (h *healthEngine) transition(d *depHealth, now time.Time) (healthReport, bool) {
	if !d.active {
		return healthReport{}, false
	}
	if d.probing {
		if d.probeUntil.IsZero() {
			if h.allObserved(d) {
				d.probing = false // no service had restarted: the usual rules
			}
			return healthReport{}, false
		}
		if now.Before(d.probeUntil) {
			return healthReport{}, false
		}
		d.probing = false
		// Decided once: Degraded or Recovered, whatever the control plane
		// last heard (the state file that said it was lost).
		if reason, at := h.fault(d, now); reason != "" {
			return h.degrade(d, reason, at, now)
		}
		return h.recover(d, now, true)
	}
	if !d.degraded {
		reason, at := h.fault(d, now)
		if reason == "" {
			return healthReport{}, false
		}
		return h.degrade(d, reason, at, now)
	}
	if h.unwell(d) {
		d.lastBad = now // recovery counts from when every service is well
		return healthReport{}, false
	}
	if now.Sub(d.lastBad) < h.recoveryWindow(d.k) {
		return healthReport{}, false
	}
	return h.recover(d, now, false)
}

// unwell reports whether a service of d is not running, or unhealthy,
// now.
func (h *healthEngine) unwell(d *depHealth) bool {
	for _, s := range d.services {
		if !s.downSince.IsZero() || (s.observed && s.obs.State != "running") || s.obs.Health == "unhealthy" {
			return true
		}
	}
	return false
}

func (h *healthEngine) allObserved(d *depHealth) bool {
	for _, s := range d.services {
		if !s.observed {
			return false
		}
	}
	return true
}

// degrade makes d Degraded for reason, at fault, unless the bound of the
// hour says to wait.
func (h *healthEngine) degrade(d *depHealth, reason string, at []*svcHealth, now time.Time) (healthReport, bool) {
	if h.count(d.key, true) >= maxDegradedPerHour {
		return healthReport{}, false
	}
	h.marks[d.key] = append(h.marks[d.key], healthMark{At: now, Degraded: true})
	d.degraded, d.reason, d.since = true, reason, now
	d.k = h.count(d.key, true)
	d.lastBad = maxTime(d.lastBad, now)
	rep := healthReport{Key: d.key, Rev: d.rev, Degraded: true, Reason: reason, Window: h.rules.window, Since: now}
	for _, s := range at {
		if len(rep.Services) == events.MaxHealthServices {
			break
		}
		rep.Services = append(rep.Services, h.serviceReport(s))
	}
	return rep, true
}

// recover makes d recovered, unless the bound of the hour says to wait;
// always: also when it was not Degraded (decided after probing).
func (h *healthEngine) recover(d *depHealth, now time.Time, always bool) (healthReport, bool) {
	if !d.degraded && !always {
		return healthReport{}, false
	}
	if h.count(d.key, false) >= maxRecoveredPerHour {
		return healthReport{}, false
	}
	h.marks[d.key] = append(h.marks[d.key], healthMark{At: now})
	stable := now.Sub(d.lastBad)
	if d.lastBad.IsZero() {
		stable = h.rules.window
	}
	rep := healthReport{Key: d.key, Rev: d.rev, Reason: events.HealthStable, Window: stable, Since: now}
	for _, s := range d.services {
		if len(rep.Services) == events.MaxHealthServices {
			break
		}
		if d.degraded && len(s.deaths) == 0 && s.last == nil {
			continue
		}
		rep.Services = append(rep.Services, h.serviceReport(s))
	}
	d.degraded, d.reason, d.since = false, "", now
	return rep, true
}

// fault is the reason d is at fault now ("" when it is not) and the
// services at fault. The most serious reason names the report: OOMKilled,
// CrashLoop, Down, Unhealthy.
func (h *healthEngine) fault(d *depHealth, now time.Time) (string, []*svcHealth) {
	rank := map[string]int{events.HealthOOMKilled: 4, events.HealthCrashLoop: 3, events.HealthDown: 2, events.HealthUnhealthy: 1}
	best := ""
	var at []*svcHealth
	for _, s := range d.services {
		r := h.serviceFault(s, now)
		if r == "" {
			continue
		}
		at = append(at, s)
		if rank[r] > rank[best] {
			best = r
		}
	}
	return best, at
}

// serviceFault is the reason service s is at fault now, or "".
func (h *healthEngine) serviceFault(s *svcHealth, now time.Time) string {
	for _, dth := range s.deaths {
		if dth.OOMKilled {
			return events.HealthOOMKilled
		}
	}
	switch {
	case len(s.deaths) >= h.rules.restarts:
		return events.HealthCrashLoop
	case !s.downSince.IsZero() && s.last != nil && now.Sub(s.downSince) >= downAfter:
		return events.HealthDown
	case s.obs.State == "running" && s.obs.Health == "unhealthy":
		return events.HealthUnhealthy
	}
	return ""
}

// degradedCount is the number of tracked revisions Degraded now.
func (h *healthEngine) degradedCount() int {
	n := 0
	for _, d := range h.deps {
		if d.degraded {
			n++
		}
	}
	return n
}

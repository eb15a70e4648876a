package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// t0 is the fake clock's start.
var t0 = time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)

var (
	testKey  = depKey{"lab", "analysis"}
	testRev  = healthRev{UID: "u1", Generation: 1, RevisionID: "r1", Hash: "h1"}
	testRev2 = healthRev{UID: "u1", Generation: 2, RevisionID: "r2", Hash: "h2"}
)

// engineRun drives an engine on a fake clock: actions at offsets from t0,
// decide every second, reports collected with their offsets.
type engineRun struct {
	h       *healthEngine
	now     time.Time
	reports []timedReport
}

type timedReport struct {
	at  time.Duration
	rep healthReport
}

func (r timedReport) String() string {
	kind := "Recovered"
	if r.rep.Degraded {
		kind = "Degraded"
	}
	return fmt.Sprintf("%s %s %s", r.at, kind, r.rep.Reason)
}

func newEngineRun() *engineRun {
	h := newHealthEngine(healthRules{}, t0)
	h.restore(healthState{}, true)
	h.track(testKey, testRev, []string{"api", "worker"}, true, t0)
	r := &engineRun{h: h, now: t0}
	r.observe("api", "running", "")
	r.observe("worker", "running", "")
	return r
}

func (r *engineRun) die(svc string, code int, oom bool) {
	r.h.died(testKey, testRev.Hash, svc, serviceDeath{At: r.now, ExitCode: code, OOMKilled: oom})
}

func (r *engineRun) observe(svc, state, health string) {
	r.h.observe(testKey, testRev.Hash, svc, serviceObs{State: state, Health: health}, r.now)
}

// crash is a death the restart policy answers at once.
func (r *engineRun) crash(svc string, code int) {
	r.die(svc, code, false)
	r.observe(svc, "running", "")
}

// until advances the clock second by second to offset, deciding at each.
func (r *engineRun) until(offset time.Duration) {
	for end := t0.Add(offset); !r.now.After(end); r.now = r.now.Add(time.Second) {
		for _, rep := range r.h.decide(r.now) {
			r.reports = append(r.reports, timedReport{at: r.now.Sub(t0), rep: rep})
		}
	}
	r.now = t0.Add(offset)
}

// at runs until offset, then do.
func (r *engineRun) at(offset time.Duration, do func()) {
	r.until(offset - time.Second)
	r.now = t0.Add(offset)
	do()
}

func (r *engineRun) got() string {
	var s []string
	for _, rep := range r.reports {
		s = append(s, rep.String())
	}
	return strings.Join(s, ", ")
}

func TestTheMonitorsRules(t *testing.T) {
	tests := []struct {
		name   string
		script func(r *engineRun)
		want   string
	}{
		{"a third death within the window is a crash loop", func(r *engineRun) {
			r.at(0, func() { r.crash("api", 2) })
			r.at(30*time.Second, func() { r.crash("api", 2) })
			r.at(60*time.Second, func() { r.crash("api", 2) })
			r.until(2 * time.Minute)
		}, "1m0s Degraded CrashLoop"},
		{"two deaths are no crash loop", func(r *engineRun) {
			r.at(0, func() { r.crash("api", 2) })
			r.at(30*time.Second, func() { r.crash("api", 2) })
			r.until(20 * time.Minute)
		}, ""},
		{"deaths further apart than the window are no crash loop", func(r *engineRun) {
			for i := range 6 {
				r.at(time.Duration(i)*3*time.Minute, func() { r.crash("api", 1) })
			}
			r.until(30 * time.Minute)
		}, ""},
		{"one OOM kill is enough", func(r *engineRun) {
			r.at(10*time.Second, func() { r.die("api", 137, true); r.observe("api", "running", "") })
			r.until(time.Minute)
		}, "10s Degraded OOMKilled"},
		{"a service not running 30 s after a death is down", func(r *engineRun) {
			r.at(5*time.Second, func() { r.die("worker", 1, false) })
			r.until(time.Minute)
		}, "35s Degraded Down"},
		{"a service restarted within 30 s is not down", func(r *engineRun) {
			r.at(5*time.Second, func() { r.die("worker", 1, false) })
			r.at(20*time.Second, func() { r.observe("worker", "running", "") })
			r.until(10 * time.Minute)
		}, ""},
		{"an unhealthy service is unhealthy, and recovers once healthy for the window", func(r *engineRun) {
			r.at(10*time.Second, func() { r.observe("api", "running", "unhealthy") })
			r.at(time.Minute, func() { r.observe("api", "running", "healthy") })
			r.until(10 * time.Minute)
		}, "10s Degraded Unhealthy, 5m59s Recovered Stable"},
		{"a crash loop recovers after the window without a death", func(r *engineRun) {
			r.at(0, func() { r.crash("api", 2) })
			r.at(10*time.Second, func() { r.crash("api", 2) })
			r.at(20*time.Second, func() { r.crash("api", 2) })
			r.until(10 * time.Minute)
		}, "20s Degraded CrashLoop, 5m20s Recovered Stable"},
		{"a death while degraded starts the recovery window again", func(r *engineRun) {
			r.at(0, func() { r.crash("api", 2) })
			r.at(10*time.Second, func() { r.crash("api", 2) })
			r.at(20*time.Second, func() { r.crash("api", 2) })
			r.at(4*time.Minute, func() { r.crash("api", 2) })
			r.until(10 * time.Minute)
		}, "20s Degraded CrashLoop, 9m0s Recovered Stable"},
		{"the recovery window doubles with each Degraded report of the hour", func(r *engineRun) {
			burst := func(at time.Duration) {
				for i := range 3 {
					r.at(at+time.Duration(i)*time.Second, func() { r.crash("api", 2) })
				}
			}
			burst(0)                // Degraded at 2s, recovered at 5m2s
			burst(6 * time.Minute)  // Degraded at 6m2s (k=2), recovered 10m later
			burst(17 * time.Minute) // Degraded at 17m2s (k=3), recovered 20m later
			r.until(40 * time.Minute)
		}, "2s Degraded CrashLoop, 5m2s Recovered Stable, 6m2s Degraded CrashLoop, 16m2s Recovered Stable, 17m2s Degraded CrashLoop, 37m2s Recovered Stable"},
		{"a death the agent caused is not given to the engine, and one of another revision is ignored", func(r *engineRun) {
			for i := range 5 {
				r.at(time.Duration(i)*time.Second, func() {
					r.h.died(testKey, "old-hash", "api", serviceDeath{At: r.now, ExitCode: 2})
				})
			}
			r.until(time.Minute)
		}, ""},
		{"a new revision starts over, with no Recovered for the old one", func(r *engineRun) {
			r.at(0, func() { r.die("api", 137, true) })
			r.at(10*time.Second, func() {
				r.h.track(testKey, testRev2, []string{"api"}, true, r.now)
				r.h.observe(testKey, testRev2.Hash, "api", serviceObs{State: "running"}, r.now)
			})
			r.until(2 * time.Hour)
		}, "0s Degraded OOMKilled"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newEngineRun()
			tc.script(r)
			if got := r.got(); got != tc.want {
				t.Errorf("reports:\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestARevisionNotReportedConvergedNeverDegrades(t *testing.T) {
	h := newHealthEngine(healthRules{}, t0)
	h.restore(healthState{}, true)
	h.track(testKey, testRev, []string{"api"}, false, t0)
	for i := range 10 {
		now := t0.Add(time.Duration(i) * time.Second)
		h.died(testKey, testRev.Hash, "api", serviceDeath{At: now, ExitCode: 2, OOMKilled: true})
		if reps := h.decide(now); len(reps) != 0 {
			t.Fatalf("a report for a revision not converged: %+v", reps)
		}
	}
}

func TestADegradedReportNamesTheServicesAtFault(t *testing.T) {
	r := newEngineRun()
	r.at(0, func() { r.crash("api", 2) })
	r.at(time.Second, func() { r.crash("api", 2) })
	r.at(2*time.Second, func() {
		r.die("api", 137, false)
		r.h.observe(testKey, testRev.Hash, "api", serviceObs{State: "running", RestartsTotal: 7}, r.now)
	})
	r.until(3 * time.Second)
	if len(r.reports) != 1 {
		t.Fatalf("reports %s", r.got())
	}
	rep := r.reports[0].rep
	if rep.Window != DefaultDegradedWindow || rep.Rev != testRev || len(rep.Services) != 1 {
		t.Fatalf("report %+v", rep)
	}
	s := rep.Services[0]
	at := t0.Add(2 * time.Second)
	if s.Name != "api" || s.Restarts != 3 || s.RestartsTotal != 7 || s.ExitCode != 137 || s.Signal != "SIGKILL" || s.State != "running" ||
		s.ExitedAt == nil || !s.ExitedAt.Equal(at) {
		t.Errorf("service %+v", s)
	}
}

// TestAFlappingServiceCostsABoundedNumberOfReportsPerHour: a service that
// crashes three times the moment its Deployment is back to normal, for 3
// simulated hours, costs at most 8 health reports per hour and
// Deployment (at most 4 Degraded and 3 Recovered), and its container
// snapshots at most 68 per hour (one a minute, and one after each
// transition); 40 such Deployments stay within the device's budget.
func TestAFlappingServiceCostsABoundedNumberOfReportsPerHour(t *testing.T) {
	const deps = 40
	h := newHealthEngine(healthRules{}, t0)
	h.restore(healthState{}, true)
	keys := make([]depKey, deps)
	for i := range keys {
		keys[i] = depKey{"lab", fmt.Sprintf("d%02d", i)}
		h.track(keys[i], testRev, []string{"api"}, true, t0)
		h.observe(keys[i], testRev.Hash, "api", serviceObs{State: "running"}, t0)
	}
	var sent []timedReport
	var snapshots []time.Duration
	var pace containersPacer
	for now := t0; now.Before(t0.Add(3 * time.Hour)); now = now.Add(time.Second) {
		for _, k := range keys {
			if d := h.deps[k]; !d.degraded {
				for range 3 {
					h.died(k, testRev.Hash, "api", serviceDeath{At: now, ExitCode: 2})
				}
				h.observe(k, testRev.Hash, "api", serviceObs{State: "running", RestartsTotal: 1}, now)
				pace.changed()
			}
		}
		reps := h.decide(now)
		for _, rep := range reps {
			sent = append(sent, timedReport{at: now.Sub(t0), rep: rep})
		}
		if len(reps) > 0 {
			pace.force()
		}
		if pace.due(now) {
			snapshots = append(snapshots, now.Sub(t0))
		}
	}
	if len(sent) < 3*healthTokens {
		t.Fatalf("only %d reports in 3 hours: the flapping did not flap", len(sent))
	}
	for start := time.Duration(0); start+time.Hour <= 3*time.Hour; start += time.Minute {
		perDep := map[depKey]int{}
		total := 0
		for _, r := range sent {
			if r.at >= start && r.at < start+time.Hour {
				perDep[r.rep.Key]++
				total++
			}
		}
		for k, n := range perDep {
			if n > 8 {
				t.Errorf("%s: %d health reports in the hour from %s", k, n, start)
			}
		}
		if total > healthTokens {
			t.Errorf("%d health reports from the device in the hour from %s, over its budget of %d", total, start, healthTokens)
		}
		n := 0
		for _, at := range snapshots {
			if at >= start && at < start+time.Hour {
				n++
			}
		}
		if n > 60+total+1 || n > 68+healthTokens {
			t.Errorf("%d container snapshots in the hour from %s", n, start)
		}
	}
	if h.coalesced == 0 {
		t.Error("nothing was coalesced: the device's budget was never reached")
	}
}

// TestOneFlappingDeploymentCostsAtMost68SnapshotsAnHour: the snapshot
// bound of a single flapping Deployment.
func TestOneFlappingDeploymentCostsAtMost68SnapshotsAnHour(t *testing.T) {
	r := newEngineRun()
	var pace containersPacer
	var snapshots, reports []time.Duration
	for ; r.now.Before(t0.Add(3 * time.Hour)); r.now = r.now.Add(time.Second) {
		if !r.h.deps[testKey].degraded {
			r.crash("api", 2)
			pace.changed()
		}
		if r.now.Second()%10 == 0 { // restarts keep changing the snapshot
			pace.changed()
		}
		reps := r.h.decide(r.now)
		for range reps {
			reports = append(reports, r.now.Sub(t0))
			pace.force()
		}
		if pace.due(r.now) {
			snapshots = append(snapshots, r.now.Sub(t0))
		}
	}
	for start := time.Duration(0); start+time.Hour <= 3*time.Hour; start += time.Minute {
		count := func(ts []time.Duration) int {
			n := 0
			for _, at := range ts {
				if at >= start && at < start+time.Hour {
					n++
				}
			}
			return n
		}
		if n := count(reports); n > 8 {
			t.Errorf("%d health reports in the hour from %s", n, start)
		}
		if n := count(snapshots); n > 68 {
			t.Errorf("%d container snapshots in the hour from %s", n, start)
		}
	}
	if len(reports) < 6 {
		t.Errorf("only %d reports in 3 hours: the flapping did not flap", len(reports))
	}
}

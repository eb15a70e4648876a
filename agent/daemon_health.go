package agent

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
)

// unstableRev is a revision with minReady that failed to settle, and the
// text of its failure.
type unstableRev struct {
	rev  healthRev
	text string
}

// applied is the end of a pass's Apply of e without error: Converged and
// watched; or, for a revision with minReady not yet reported Converged,
// handed to the monitor to settle (the pass moves on, the device stays
// Applying); or, for a revision that failed to settle, Failed again.
func (d *daemon) applied(ctx context.Context, e events.IntentEntry) {
	k := depKey{e.Namespace, e.Name}
	d.mu.Lock()
	u, failed := d.unstable[k]
	if failed && (u.rev.UID != e.UID || u.rev.Generation != e.Generation || u.rev.RevisionID != e.RevisionID) {
		delete(d.unstable, k) // a new revision: the old failure is gone
		failed = false
	}
	d.mu.Unlock()
	if failed {
		d.status(ctx, e, events.WorkloadFailed, u.text) // sticky: never settled again
		return
	}
	if d.mon.watching(e) {
		// Watched already (a resync, a repair): nothing to read again.
		switch {
		case d.mon.settling(e):
		case e.MinReadySeconds == 0 || d.reportedPhase(e, events.WorkloadConverged):
			d.status(ctx, e, events.WorkloadConverged, "")
		}
		return
	}
	spec, err := d.o.Reconciler.Watched(ctx, e)
	if err != nil {
		// Not the workload's failure: the revision applied. It is not
		// watched until a pass can read it.
		d.log.WarnContext(ctx, "the applied revision cannot be watched", "deployment", k.String(), "error", err)
		if e.MinReadySeconds == 0 || d.reportedPhase(e, events.WorkloadConverged) {
			d.status(ctx, e, events.WorkloadConverged, "")
		}
		return
	}
	if e.MinReadySeconds > 0 && !d.reportedPhase(e, events.WorkloadConverged) {
		if d.mon.settling(e) {
			return
		}
		minReady := time.Duration(e.MinReadySeconds) * time.Second
		start := spec.StartedAt
		if start.IsZero() {
			start = d.mon.now()
		}
		d.mon.settle(spec, minReady, start.Add(minReady))
		return
	}
	d.mon.track(spec) // before the report: a death right after it counts
	d.status(ctx, e, events.WorkloadConverged, "")
}

// reportedPhase reports whether the last report of e's Deployment was
// phase for e's revision.
func (d *daemon) reportedPhase(e events.IntentEntry, phase events.WorkloadPhase) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	last, ok := d.reported[[2]string{e.Namespace, e.Name}]
	return ok && last.UID == e.UID && last.Generation == e.Generation && last.RevisionID == e.RevisionID && last.Phase == phase
}

// unstableRevision reports e's revision Failed with err, for good: a
// resync pass reports the same failure and never settles it again.
func (d *daemon) unstableRevision(ctx context.Context, e events.IntentEntry, err *UnstableError) {
	text := err.Error()
	d.mu.Lock()
	d.unstable[depKey{e.Namespace, e.Name}] = unstableRev{rev: healthRev{UID: e.UID, Generation: e.Generation, RevisionID: e.RevisionID}, text: text}
	d.mu.Unlock()
	d.log.WarnContext(ctx, "deployment not stable within its minReady", "deployment", e.Namespace+"/"+e.Name, "generation", e.Generation,
		"service", err.Name, "exit_code", err.ExitCode)
	d.status(ctx, e, events.WorkloadFailed, text)
}

// health publishes a Degraded or Recovered report on the device's health
// subject, with logs (redacted) for the services a Degraded one names, and
// returns its message to be sent again after a reconnect.
func (d *daemon) health(ctx context.Context, rep healthReport, logs map[string][]string) *nats.Msg {
	t, kind := events.TypeWorkloadRecovered, "recovered"
	if rep.Degraded {
		t, kind = events.TypeWorkloadDegraded, "degraded"
	}
	wh := events.WorkloadHealth{Namespace: rep.Key.ns, Deployment: rep.Key.name, UID: rep.Rev.UID, Generation: rep.Rev.Generation,
		RevisionID: rep.Rev.RevisionID, Reason: rep.Reason, Window: int(rep.Window / time.Second), Since: rep.Since.UTC(),
		Services: []events.ServiceHealth{}}
	for _, s := range rep.Services {
		wh.Services = append(wh.Services, events.ServiceHealth{Name: s.Name, State: s.State, Restarts: s.Restarts,
			RestartsTotal: s.RestartsTotal, ExitCode: s.ExitCode, Signal: s.Signal, OOMKilled: s.OOMKilled, ExitedAt: s.ExitedAt,
			Health: s.Health, Logs: logs[s.Name]})
	}
	var opts []events.Option
	if rep.Rev.UID != "" {
		opts = append(opts, events.WithCorrelation(rep.Rev.UID, rep.Rev.Generation))
	}
	d.log.InfoContext(ctx, "deployment "+kind, "deployment", rep.Key.String(), "generation", rep.Rev.Generation, "reason", rep.Reason)
	m := d.report(ctx, events.Keys{Device: d.o.Device}, events.NewWorkloadHealth(t, wh), opts...)
	if m != nil {
		d.o.Metrics.healthReports(kind, 1)
	}
	return m
}

// resend publishes m, the report of key (offlineKey), again, unchanged
// (same Nats-Msg-Id), and echoes it like a workload report.
func (d *daemon) resend(ctx context.Context, key string, m *nats.Msg) {
	if !d.o.Conn.IsConnected() {
		return // the next reconnect sends it
	}
	if err := d.o.Conn.PublishMsg(m); err != nil {
		d.log.WarnContext(ctx, "health report not sent again", "subject", m.Subject, "error", err)
		return
	}
	d.sentOn(key, time.Now())
	d.remember(m, time.Now())
}

// poke wakes the loop for a pass.
func (d *daemon) pokePass() {
	if d.poke != nil {
		d.poke()
	}
}

// Stability (ADR 0019, A.5): a Deployment with minReady counts as
// converged on this device only once its services have run for that long
// without a death. The pass does not wait for it: it hands the revision to
// the monitor (settle) and moves on; the monitor reports Converged at the
// deadline, or Failed with an *UnstableError at the first death before it.

package agent

import (
	"fmt"
	"strings"
	"time"
)

// UnstableError: a service of a revision with minReady died before the
// revision had run for minReady on this device. The revision failed here;
// it stays failed until a new revision.
type UnstableError struct {
	// Name of the service.
	Name string
	// ExitCode of its death; Signal names the signal of an exit code
	// 128+n ("" otherwise); OOMKilled when the kernel killed it for memory.
	ExitCode  int
	Signal    string
	OOMKilled bool
	// After is how long after its start it died (0: unknown).
	After time.Duration
	// MinReady is the Deployment's stability period.
	MinReady time.Duration
	// Restarts is how many deaths the agent saw while it settled.
	Restarts int
	// Output is its last lines, redacted (redactOutput); nil when it
	// printed nothing or they could not be read.
	Output []string
}

func (e *UnstableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "service %s ", e.Name)
	switch {
	case e.OOMKilled:
		b.WriteString("was killed for lack of memory (OOM)")
	case e.Signal != "":
		fmt.Fprintf(&b, "was killed by %s (exit code %d)", e.Signal, e.ExitCode)
	default:
		fmt.Fprintf(&b, "exited with code %d", e.ExitCode)
	}
	if e.After > 0 {
		fmt.Fprintf(&b, " %s after it started", e.After.Round(time.Second))
	}
	restarts := "restarts"
	if e.Restarts == 1 {
		restarts = "restart"
	}
	fmt.Fprintf(&b, ", within the Deployment's minReady of %s (%d %s)", e.MinReady, e.Restarts, restarts)
	if len(e.Output) > 0 {
		fmt.Fprintf(&b, "; its last output: %s", strings.Join(e.Output, " | "))
	}
	return b.String()
}

// unstableDeath is the death that failed a settling revision.
type unstableDeath struct {
	service   string
	death     serviceDeath
	startedAt time.Time
	restarts  int
}

// settleResult is the end of a revision's settling: converged (err nil)
// or failed.
type settleResult struct {
	Key depKey
	Rev healthRev
	Err *UnstableError
}

// settle makes rev of k settle until deadline (the latest start of its
// services plus minReady): it is tracked, not active, until then. starts
// are the services' last starts as the engine showed them.
func (h *healthEngine) settle(k depKey, rev healthRev, services []string, starts map[string]time.Time, minReady time.Duration, deadline, now time.Time) {
	if d, ok := h.deps[k]; ok && d.rev == rev && (d.active || !d.settle.IsZero()) {
		return // settling already, or settled
	}
	h.track(k, rev, services, false, now)
	d := h.deps[k]
	d.settle, d.minReady = deadline, minReady
	for _, s := range d.services {
		if s.obs.StartedAt.IsZero() {
			s.obs.StartedAt = starts[s.name]
		}
	}
}

// settling reports whether rev of k is settling now.
func (h *healthEngine) settling(k depKey, rev healthRev) bool {
	d, ok := h.deps[k]
	return ok && d.rev == rev && !d.settle.IsZero()
}

// settled ends the settling revisions whose deadline passed without a
// death (converged, active from now) or that saw a death (failed, never
// active: a failed revision is not watched for Degraded).
func (h *healthEngine) settled(now time.Time) []settleResult {
	var out []settleResult
	for _, d := range h.deps {
		if d.settle.IsZero() {
			continue
		}
		switch {
		case d.unstable != nil:
			u := d.unstable
			err := &UnstableError{Name: u.service, ExitCode: u.death.ExitCode, Signal: signalOf(u.death.ExitCode),
				OOMKilled: u.death.OOMKilled, MinReady: d.minReady, Restarts: u.restarts}
			if !u.startedAt.IsZero() && u.death.At.After(u.startedAt) {
				err.After = u.death.At.Sub(u.startedAt)
			}
			d.settle = time.Time{}
			out = append(out, settleResult{Key: d.key, Rev: d.rev, Err: err})
		case !now.Before(d.settle):
			d.settle, d.active = time.Time{}, true
			d.lastBad = time.Time{}
			out = append(out, settleResult{Key: d.key, Rev: d.rev})
		}
	}
	return out
}

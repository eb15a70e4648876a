package bench

import (
	"context"
	"fmt"
	"io"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nationtech/harmony-fleet/authcallout"
)

// HoldResult is the steady state of Options.Hold: the devices kept
// connected while their user JWTs expire (Options.TokenLifetime) and are
// re-authorised, then a revision rolled out to all of them.
type HoldResult struct {
	// Duration is how long the devices were held.
	Duration time.Duration
	// Allowed and Refused are the callout's authorisations over the hold:
	// each allowed one is a device's (re)connect, so Allowed ÷ Duration is
	// the reconnect rate, and the provider granted as many id_tokens.
	Allowed, Refused uint64
	// CPU is the control plane process's CPU time over the hold (user and
	// system): the callout replicas, the development provider and the
	// rollout runner; with the embedded server, the server's too.
	CPU time.Duration
	// Converged is the time from the append of the revision rolled out
	// after the hold until every device reported it Converged: a device
	// that missed its intent notification across a reconnect would not.
	Converged time.Duration
}

// calloutCounter reads the callout replicas' authorisation counts.
type calloutCounter struct {
	reg *prometheus.Registry
}

func newCalloutCounter(m *authcallout.Metrics) (*calloutCounter, error) {
	reg := prometheus.NewRegistry()
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("scalebench: callout metrics: %w", err)
		}
	}
	return &calloutCounter{reg: reg}, nil
}

// counts returns the allowed and refused authorisations so far.
func (c *calloutCounter) counts() (allowed, refused uint64, err error) {
	fams, err := c.reg.Gather()
	if err != nil {
		return 0, 0, fmt.Errorf("scalebench: callout metrics: %w", err)
	}
	for _, f := range fams {
		if f.GetName() != authcallout.MetricAuthorizations {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() != "result" {
					continue
				}
				v := uint64(m.GetCounter().GetValue())
				if l.GetValue() == "allowed" {
					allowed += v
				} else {
					refused += v
				}
			}
		}
	}
	return allowed, refused, nil
}

// processCPU is this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// hold keeps the n connected devices for Options.Hold, counting the
// callout's authorisations and this process's CPU, then rolls out a
// revision to all of them.
func (b *bench) hold(ctx context.Context, n int, res *Result) (*HoldResult, error) {
	o, cp := b.o, b.cp
	a0, r0, err := cp.callout.counts()
	if err != nil {
		return nil, err
	}
	reconnects := cp.monitor.Stats().Reconnects
	cpu0, start := processCPU(), time.Now()
	o.Logger.Info("holding the devices", "devices", n, "for", o.Hold, "tokenLifetime", o.TokenLifetime)
	t := time.NewTimer(o.Hold)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-cp.failed:
		return nil, cp.failure()
	}
	h := &HoldResult{Duration: time.Since(start), CPU: processCPU() - cpu0}
	a1, r1, err := cp.callout.counts()
	if err != nil {
		return h, err
	}
	h.Allowed, h.Refused = a1-a0, r1-r0
	// The devices' connections churn; the measurements' must not, or the
	// rollout after the hold may wait for reports it was never given.
	if r := cp.monitor.Stats().Reconnects - reconnects; r > 0 {
		return h, fmt.Errorf("%w: %d times over the hold", ErrMeasurementGap, r)
	}
	// The hold's figures are logged before the rollout after it, so that
	// a rollout that fails (its error ends the run) does not lose them.
	o.Logger.Info("hold measured", "for", h.Duration.Round(time.Second), "authorised", h.Allowed, "refused", h.Refused,
		"controlPlaneCPU", h.CPU.Round(100*time.Millisecond))
	fig, err := b.rollout(ctx, n, res, nil)
	if err != nil {
		return h, fmt.Errorf("the revision after the hold (%d reconnects authorised and %d refused over %s, control plane CPU %s): %w",
			h.Allowed, h.Refused, h.Duration.Round(time.Second), h.CPU.Round(100*time.Millisecond), err)
	}
	h.Converged = fig.converged
	return h, nil
}

// printHold prints the hold's figures, each one that has a goal against it.
func printHold(w io.Writer, r Result) {
	h := r.Hold
	secs := max(h.Duration.Seconds(), 1e-9)
	fmt.Fprintf(w, "  hold        %s with id_token lifetime %s: %d reconnects authorised (%.2f/s; %.0f/s per 100,000 devices), %d refused; control plane process CPU %.1f s (%.3f cores: callout, provider, runner)\n",
		h.Duration.Round(time.Second), r.TokenLifetime, h.Allowed, float64(h.Allowed)/secs, float64(h.Allowed)/secs*100000/float64(r.N), h.Refused,
		h.CPU.Seconds(), h.CPU.Seconds()/secs)
	fmt.Fprintf(w, "  goal        N=%d every device converged on the revision after the hold (no notification missed across %d reconnects): converged in %s: met\n",
		r.N, h.Allowed, h.Converged.Round(time.Millisecond))
	fmt.Fprintf(w, "  goal        N=%d no re-authorisation refused over the hold (%d authorised): %d: %s\n",
		r.N, h.Allowed, h.Refused, met(h.Refused == 0))
}

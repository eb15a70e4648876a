// What the health engine's decisions say, and how many of them go out:
// the reports' content, the per-device budget and the coalescing of what
// the budget holds back.

package agent

import (
	"slices"
	"strconv"
	"time"
)

// serviceReport describes service s in a report.
func (h *healthEngine) serviceReport(s *svcHealth) serviceReport {
	r := serviceReport{Name: s.name, State: s.obs.State, Restarts: len(s.deaths), RestartsTotal: s.obs.RestartsTotal,
		Health: s.obs.Health}
	if r.State == "" {
		r.State = "other"
	}
	if s.last != nil {
		r.ExitCode = s.last.ExitCode
		r.Signal = signalOf(s.last.ExitCode)
		r.OOMKilled = s.last.OOMKilled
		at := s.last.At.UTC()
		r.ExitedAt = &at
	}
	return r
}

// signalOf names the signal of an exit code 128+n, as the shell reports
// a process killed by signal n; "" for another code.
func signalOf(code int) string {
	names := map[int]string{1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
		9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM"}
	if code <= 128 || code > 128+64 {
		return ""
	}
	if n, ok := names[code-128]; ok {
		return n
	}
	return "SIG" + strconv.Itoa(code-128)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// queue holds rep for the budget, replacing a pending report of the same
// Deployment (coalesced).
func (h *healthEngine) queue(rep healthReport) {
	if _, ok := h.pending[rep.Key]; ok {
		h.coalesced++
	}
	h.pending[rep.Key] = rep
}

// flush sends the pending reports the budget allows, oldest Deployment
// first; one that says what was last sent for its Deployment is dropped.
func (h *healthEngine) flush(now time.Time) []healthReport {
	if len(h.pending) == 0 {
		return nil
	}
	keys := make([]depKey, 0, len(h.pending))
	for k := range h.pending {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b depKey) int {
		if c := h.pending[a].Since.Compare(h.pending[b].Since); c != 0 {
			return c
		}
		return cmpString(a.String(), b.String())
	})
	var out []healthReport
	for _, k := range keys {
		rep := h.pending[k]
		if last, ok := h.sent[k]; ok && last.Rev == rep.Rev && last.Degraded == rep.Degraded {
			delete(h.pending, k) // the control plane already has this state
			continue
		}
		if !h.bucket.take(now) {
			break
		}
		delete(h.pending, k)
		h.sent[k] = rep
		out = append(out, rep)
	}
	return out
}

// hourBudget allows at most n events in any hour: a sliding window
// (a token bucket of n per hour would allow 2n in the first hour).
type hourBudget struct {
	n     int
	taken []time.Time // within the last hour, oldest first
}

// take takes one of the budget at now, if the last hour left one.
func (b *hourBudget) take(now time.Time) bool {
	i := 0
	for i < len(b.taken) && now.Sub(b.taken[i]) >= time.Hour {
		i++
	}
	b.taken = b.taken[i:]
	if len(b.taken) >= b.n {
		return false
	}
	b.taken = append(b.taken, now)
	return true
}

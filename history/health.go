package history

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// filterHealth reads every device's health reports (device.workload.degraded
// and device.workload.recovered, FLEET_REPORTS).
const filterHealth = "fleet.report.*.health"

// Entry types of a timeline that are not event types: a device's
// Degraded state of a Deployment cleared by what the fold saw, not by a
// report of the device.
const (
	// EntryHealthCleared: a newer revision of the Deployment, or its
	// deletion, ends the Degraded state a device reported of an older one
	// (the agent sends no Recovered for a revision it no longer runs).
	EntryHealthCleared events.Type = "history.degraded-cleared"
)

// Bounds of what a timeline shows of a health report: a device's report is
// hostile, whatever bounds its agent keeps.
const (
	// maxHealthName bounds a service name or a reason in a summary.
	maxHealthName = 64
	// maxHealthLine bounds the output line a summary quotes.
	maxHealthLine = 200
	// maxHealthSummary bounds a health entry's summary.
	maxHealthSummary = 1024
)

// HealthState is a device's Degraded report of a Deployment that no
// Recovered report, newer revision or deletion has ended yet.
type HealthState struct {
	Device string `json:"device"`
	// Deployment is namespace/name.
	Deployment string `json:"deployment"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	RevisionID string `json:"revisionId"`
	// Reason is CrashLoop, OOMKilled, Down or Unhealthy (as the device
	// wrote it, bounded).
	Reason string `json:"reason"`
	// Summary is the report's one-line description, bounded.
	Summary string `json:"summary"`
	// Since is when the stream stored the Degraded report; ID is its id.
	Since time.Time `json:"since"`
	ID    string    `json:"id"`
}

// healthKey returns the Deployment a health report concerns and its data,
// clipped to the contract's bounds (a device may send anything).
func healthKey(rec events.Record) (events.Keys, events.WorkloadHealth, bool) {
	d, err := events.Decode[events.WorkloadHealth](rec.Event)
	if err != nil {
		return events.Keys{}, d, false
	}
	return events.Keys{Namespace: d.Namespace, Name: d.Deployment}, d.Clip(), true
}

// isHealth reports whether t is a health report's type.
func isHealth(t events.Type) bool {
	return t == events.TypeWorkloadDegraded || t == events.TypeWorkloadRecovered
}

// healthText describes a health report without its device: "degraded: api
// CrashLoop, exit 2, 3 restarts in 5m, last output "boom"" or "recovered
// (stable 5m)". d is clipped (healthKey): every part a device wrote is
// bounded again here, and the whole.
func healthText(t events.Type, d events.WorkloadHealth) string {
	if t == events.TypeWorkloadRecovered {
		return fmt.Sprintf("recovered (stable %s)", windowText(d.Window))
	}
	parts := make([]string, 0, len(d.Services))
	for _, s := range d.Services {
		parts = append(parts, serviceText(d.Reason, d.Window, s))
	}
	if len(parts) == 0 {
		parts = append(parts, cut(d.Reason, maxHealthName))
	}
	return cut("degraded: "+strings.Join(parts, "; "), maxHealthSummary)
}

// serviceText describes one service at fault.
func serviceText(reason string, window int, s events.ServiceHealth) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", cut(s.Name, maxHealthName), cut(reason, maxHealthName))
	if s.Signal != "" {
		fmt.Fprintf(&b, ", killed by %s", cut(s.Signal, maxHealthName))
	} else {
		fmt.Fprintf(&b, ", exit %d", s.ExitCode)
	}
	if s.OOMKilled {
		b.WriteString(", OOM-killed")
	}
	if s.State != "" && s.State != "running" {
		fmt.Fprintf(&b, ", %s", cut(s.State, maxHealthName))
	}
	if s.Health == "unhealthy" {
		b.WriteString(", unhealthy")
	}
	fmt.Fprintf(&b, ", %d restarts in %s", s.Restarts, windowText(window))
	if n := len(s.Logs); n > 0 {
		fmt.Fprintf(&b, ", last output %q", cut(s.Logs[n-1], maxHealthLine))
	}
	return b.String()
}

// windowText is a window in seconds as a person reads it: 5m, 1h, 90s.
func windowText(sec int) string {
	switch {
	case sec <= 0 || sec > 100*24*3600:
		return fmt.Sprintf("%ds", sec)
	case sec%3600 == 0:
		return fmt.Sprintf("%dh", sec/3600)
	case sec%60 == 0:
		return fmt.Sprintf("%dm", sec/60)
	}
	return (time.Duration(sec) * time.Second).String()
}

// cut bounds s to n bytes, cut on a character with "…" appended. Escaping
// is the renderers' (events.Printable).
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// healthFold keeps, for one timeline, the Degraded states not ended yet
// (keyed by device or by Deployment, as the timeline needs) and what it
// needs to spot a re-sent copy of a report.
type healthFold struct {
	// states are the Degraded states, by key.
	states map[string]HealthState
	// ids are the event ids of the health reports seen; last is the data
	// of the last health report per key and type.
	ids  map[string]bool
	last map[string]string
}

func newHealthFold() *healthFold {
	return &healthFold{states: map[string]HealthState{}, ids: map[string]bool{}, last: map[string]string{}}
}

// resent reports whether rec is a copy of a health report seen before: the
// same event id (an agent re-publishes a report byte for byte after a
// reconnect, and the server keeps it again past its duplicate window), or
// the same type and data as the key's last one (reports are on change
// only). It records rec.
func (h *healthFold) resent(key string, rec events.Record) bool {
	id, data := rec.Event.ID.String(), string(rec.Event.Type)+" "+string(rec.Event.Data)
	seen := h.ids[id] || h.last[key] == data
	h.ids[id], h.last[key] = true, data
	return seen
}

// apply records a health report of key (not a copy, counted).
func (h *healthFold) apply(key string, rec events.Record, d events.WorkloadHealth, summary string) {
	if rec.Event.Type == events.TypeWorkloadRecovered {
		delete(h.states, key)
		return
	}
	h.states[key] = HealthState{Device: rec.Event.Keys.Device, Deployment: d.Namespace + "/" + d.Deployment, UID: d.UID, Generation: d.Generation,
		RevisionID: d.RevisionID, Reason: cut(d.Reason, maxHealthName), Summary: summary, Since: rec.Stored.UTC(), ID: rec.Event.ID.String()}
}

// moveOn ends key's Degraded state when the device reports another
// revision of the Deployment, or its removal: it moved on, and its agent
// sends no Recovered for the revision it left.
func (h *healthFold) moveOn(key string, d events.WorkloadStatus) {
	if s, ok := h.states[key]; ok && (s.UID != d.UID || s.Generation != d.Generation || d.Phase == events.WorkloadRemoved) {
		delete(h.states, key)
	}
}

// clear ends the Degraded states of deployment (namespace/name) for which
// keep returns false, and returns an entry for each, built on rec's (the
// revision or deletion that ended them), in key order.
func (h *healthFold) clear(rec events.Record, deployment string, why string, keep func(HealthState) bool) []Entry {
	var out []Entry
	for _, k := range slices.Sorted(maps.Keys(h.states)) {
		s := h.states[k]
		if s.Deployment != deployment || keep(s) {
			continue
		}
		delete(h.states, k)
		e := entryOf(rec)
		e.Type, e.Device, e.Deployment, e.Generation, e.RevisionID = EntryHealthCleared, s.Device, s.Deployment, s.Generation, s.RevisionID
		e.Summary = fmt.Sprintf("%s degraded (%s, generation %d) cleared by %s", s.Device, s.Reason, s.Generation, why)
		out = append(out, e)
	}
	return out
}

// superseded ends the Degraded states of deployment (namespace/name) that
// rec, a revision created or the Deployment's deletion, supersedes:
// current says whether a state's revision is still the current one after
// rec (name is its revision, for the entry).
func (h *healthFold) superseded(rec events.Record, deployment string, current func(uid string, gen int64) bool, name string) []Entry {
	if len(h.states) == 0 {
		return nil
	}
	switch rec.Event.Type {
	case events.TypeDeploymentDeleted:
		return h.clear(rec, deployment, "the Deployment's deletion", func(HealthState) bool { return false })
	case events.TypeDeploymentRevisionCreated:
		return h.clear(rec, deployment, name, func(s HealthState) bool { return current(s.UID, s.Generation) })
	}
	return nil
}

// supersededIn is superseded for a Deployment timeline: ro is the rollout
// fold after rec.
func (h *healthFold) supersededIn(rec events.Record, deployment string, ro projections.Rollout) []Entry {
	return h.superseded(rec, deployment, ro.IsCurrent, fmt.Sprintf("revision %s (generation %d)", ro.RevisionID, ro.Generation))
}

// list returns the states sorted by key.
func (h *healthFold) list() []HealthState {
	out := make([]HealthState, 0, len(h.states))
	for _, k := range slices.Sorted(maps.Keys(h.states)) {
		out = append(out, h.states[k])
	}
	return out
}

// ignoredHealth says why a health report does not count for the
// Deployment's rollout fold ro (before it): "" when it concerns the
// current revision and a frozen target.
func ignoredHealth(ro projections.Rollout, device string, d events.WorkloadHealth) string {
	switch {
	case ro.IsCurrent(d.UID, d.Generation):
		if !ro.IsTarget(device) {
			return "device is not a frozen target of this revision"
		}
		return ""
	case ro.UID == d.UID && d.Generation < ro.Generation:
		return fmt.Sprintf("health report of an older revision (current: generation %d)", ro.Generation)
	}
	return "health report of a revision that is not the current one"
}

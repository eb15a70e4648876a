package projections

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// Health folds one Deployment's device.workload.degraded and
// device.workload.recovered reports (ADR 0019) into the devices that are
// degraded now: at most one entry per device, for the revision it last
// reported degraded. It never changes the rollout: phase, counts and Ready
// are the Rollout's alone.
//
// What a report may do is decided by the caller (the rollout runner accepts
// a health report only from a device that holds that revision); Health
// trusts no bound of the report itself: it clips it (WorkloadHealth.Clip)
// and keeps a bounded message. Every time in it is the stream's stored
// time, so a rebuild from zero equals the live fold. The zero Health is
// empty and ready to use; it is not safe for concurrent use.
type Health struct {
	devices map[string]DegradedEntry
	// since is when the set last went from empty to not empty or back
	// (stream time); zero before the first entry.
	since time.Time
}

// DegradedEntry is one degraded device of a Deployment.
type DegradedEntry struct {
	Device     string `json:"device"`
	UID        string `json:"uid"`
	Generation int64  `json:"generation"`
	RevisionID string `json:"revisionId"`
	// Reason is the report's reason (events.HealthCrashLoop …), clipped.
	Reason string `json:"reason"`
	// Message names the services at fault: "api: CrashLoop, exited with
	// code 2, 3 restarts in 5m0s"; at most MaxDegradedMessage bytes,
	// escaped.
	Message string `json:"message"`
	// Since is when the stream stored the report that degraded it (the
	// first of a re-sent one).
	Since time.Time `json:"since"`
}

// MaxDegradedMessage bounds DegradedEntry.Message.
const MaxDegradedMessage = 256

// Apply folds one event of the Deployment (its Keys.Device names the
// reporting device for report types) and reports whether the degraded set
// changed:
//
//   - device.workload.degraded sets or replaces the device's entry (a
//     re-sent report of the same revision and reason keeps its Since);
//   - device.workload.recovered of the revision the entry names deletes it;
//   - device.workload.status of another revision, or Removed, deletes it:
//     the device moved on;
//   - deployment.deleted clears every entry.
//
// Anything else, and a report whose data does not decode, changes nothing.
func (h *Health) Apply(p *Payload) bool {
	at := cmp.Or(p.Stored, p.Event.Time)
	dev := p.Event.Keys.Device
	switch p.Event.Type {
	case events.TypeWorkloadDegraded:
		d, err := p.WorkloadHealth()
		if err != nil || dev == "" {
			return false
		}
		e := degradedEntry(dev, d.Clip(), at)
		if cur, ok := h.devices[dev]; ok {
			if cur.UID == e.UID && cur.Generation == e.Generation && cur.Reason == e.Reason && cur.Message == e.Message &&
				cur.RevisionID == e.RevisionID {
				return false // re-sent
			}
			if cur.UID == e.UID && cur.Generation == e.Generation {
				e.Since = cur.Since // still degraded: since the first report
			}
		}
		h.set(dev, e, at)
		return true
	case events.TypeWorkloadRecovered:
		d, err := p.WorkloadHealth()
		if err != nil {
			return false
		}
		return h.deleteIf(dev, at, func(e DegradedEntry) bool { return e.UID == d.UID && e.Generation == d.Generation })
	case events.TypeWorkloadStatus:
		d, err := p.WorkloadStatus()
		if err != nil {
			return false
		}
		return h.deleteIf(dev, at, func(e DegradedEntry) bool {
			return e.UID != d.UID || e.Generation != d.Generation || d.Phase == events.WorkloadRemoved
		})
	case events.TypeDeploymentDeleted:
		if len(h.devices) == 0 {
			return false
		}
		clear(h.devices)
		h.since = at
		return true
	}
	return false
}

// Prune deletes the entries keep refuses (a device that no longer holds
// the revision it reported degraded), with at the time it happened, and
// reports whether any went.
func (h *Health) Prune(at time.Time, keep func(DegradedEntry) bool) bool {
	changed := false
	for dev, e := range h.devices {
		if !keep(e) {
			delete(h.devices, dev)
			changed = true
		}
	}
	if changed && len(h.devices) == 0 {
		h.since = at
	}
	return changed
}

func (h *Health) set(dev string, e DegradedEntry, at time.Time) {
	if h.devices == nil {
		h.devices = map[string]DegradedEntry{}
	}
	if len(h.devices) == 0 {
		h.since = at
	}
	h.devices[dev] = e
}

func (h *Health) deleteIf(dev string, at time.Time, gone func(DegradedEntry) bool) bool {
	e, ok := h.devices[dev]
	if !ok || !gone(e) {
		return false
	}
	delete(h.devices, dev)
	if len(h.devices) == 0 {
		h.since = at
	}
	return true
}

// Len is how many devices are degraded.
func (h *Health) Len() int {
	if h == nil {
		return 0
	}
	return len(h.devices)
}

// Since is when the degraded set last turned non-empty or empty (stream
// time); zero when it never had an entry.
func (h *Health) Since() time.Time {
	if h == nil {
		return time.Time{}
	}
	return h.since
}

// Entries returns the degraded devices sorted by device id.
func (h *Health) Entries() []DegradedEntry {
	if h == nil {
		return nil
	}
	out := make([]DegradedEntry, 0, len(h.devices))
	for _, e := range h.devices {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b DegradedEntry) int { return strings.Compare(a.Device, b.Device) })
	return out
}

// degradedEntry builds the entry of a clipped degraded report of dev,
// stored at at.
func degradedEntry(dev string, d events.WorkloadHealth, at time.Time) DegradedEntry {
	parts := make([]string, 0, len(d.Services))
	for _, s := range d.Services {
		parts = append(parts, serviceText(d.Reason, time.Duration(d.Window)*time.Second, s))
	}
	msg := strings.Join(parts, "; ")
	if msg == "" {
		msg = d.Reason
	}
	return DegradedEntry{Device: dev, UID: d.UID, Generation: d.Generation, RevisionID: d.RevisionID, Reason: d.Reason,
		Message: events.PrintableCut(msg, MaxDegradedMessage), Since: at}
}

// serviceText is one service of a degraded report: "api: CrashLoop,
// exited with code 2, 3 restarts in 5m0s".
func serviceText(reason string, window time.Duration, s events.ServiceHealth) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", s.Name, reason)
	switch {
	case s.OOMKilled:
		b.WriteString(", OOM-killed")
	case s.Signal != "":
		fmt.Fprintf(&b, ", killed by %s", s.Signal)
	case s.State != "running" || s.ExitCode != 0:
		fmt.Fprintf(&b, ", exited with code %d", s.ExitCode)
	}
	if s.Restarts > 0 && window > 0 {
		fmt.Fprintf(&b, ", %d restarts in %s", s.Restarts, window)
	} else if s.Restarts > 0 {
		fmt.Fprintf(&b, ", %d restarts", s.Restarts)
	}
	if s.Health == "unhealthy" && reason != events.HealthUnhealthy {
		b.WriteString(", unhealthy")
	}
	return b.String()
}

type healthSnapshot struct {
	Devices []DegradedEntry `json:"devices,omitempty"`
	Since   time.Time       `json:"since,omitzero"`
}

// MarshalJSON encodes the fold (for the runner's checkpoint).
func (h Health) MarshalJSON() ([]byte, error) {
	return json.Marshal(healthSnapshot{Devices: h.Entries(), Since: h.since})
}

// UnmarshalJSON restores a fold MarshalJSON encoded.
func (h *Health) UnmarshalJSON(b []byte) error {
	var s healthSnapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("health snapshot: %w", err)
	}
	*h = Health{since: s.Since}
	for _, e := range s.Devices {
		if h.devices == nil {
			h.devices = map[string]DegradedEntry{}
		}
		h.devices[e.Device] = e
	}
	return nil
}

package agent

import "time"

// containersEvery is the least time between two device.containers
// snapshots, but for the one right after a health transition (ADR 0019,
// A.4).
const containersEvery = time.Minute

// containersPacer decides when a device.containers snapshot goes out: on
// a change, at most one every containersEvery, and at once after a health
// transition (force) or a (re)connect. Not safe for concurrent use.
type containersPacer struct {
	last   time.Time
	sent   bool
	dirty  bool
	forced bool
}

// changed says the containers changed since the last snapshot.
func (p *containersPacer) changed() { p.dirty = true }

// force makes the next due true whatever the time since the last one.
func (p *containersPacer) force() { p.dirty, p.forced = true, true }

// due reports whether a snapshot goes out at now, and then counts it sent.
func (p *containersPacer) due(now time.Time) bool {
	if !p.dirty || (!p.forced && p.sent && now.Sub(p.last) < containersEvery) {
		return false
	}
	p.last, p.sent, p.dirty, p.forced = now, true, false, false
	return true
}

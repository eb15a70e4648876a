package agent

import "time"

// defaultRebaseAfter is how long a lower intent sequence, read on a server
// the agent was never connected to, must stay what that server holds
// before the agent applies it (rebaseLower).
const defaultRebaseAfter = 30 * time.Second

// rebaseLower reports whether the value at seq, lower than the sequence
// of a value already applied (lastSeq), applies now. Stream sequence
// decides which value is newer, so a lower one never applies on a server
// the agent knew. On a server it was never connected to (connectedTo: a
// restarted server, a full cluster restart, a restore from a backup) the
// stream may have been restored or started anew, below the values the
// agent applied: a lower sequence there applies once it is still what
// the server holds rebaseAfter after it was first read, so that a replica
// still catching up (one answers direct gets from 90 % synchronised)
// cannot take the device back for a moment (ADR 0034). The first sighting
// wakes a pass at that time. The caller holds d.mu.
func (d *daemon) rebaseLower(now time.Time) bool {
	if !d.rebase {
		return false
	}
	after := d.o.rebaseAfter
	if after <= 0 {
		after = defaultRebaseAfter
	}
	if d.lowerSince.IsZero() {
		d.lowerSince = now
		if d.rebaseWake != nil {
			d.rebaseWake.Stop()
		}
		if d.poke != nil {
			d.rebaseWake = time.AfterFunc(after, d.poke)
		}
		return false
	}
	if now.Sub(d.lowerSince) < after {
		return false
	}
	d.rebase, d.lowerSince = false, time.Time{}
	return true
}

// rebased ends a rebase: the server holds a value at a sequence not below
// the last one applied. The caller holds d.mu.
func (d *daemon) rebased() {
	d.rebase, d.lowerSince = false, time.Time{}
	if d.rebaseWake != nil {
		d.rebaseWake.Stop()
		d.rebaseWake = nil
	}
}

package projections

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Maintenance windows of a revision (ADR 0029): a target handed the
// revision outside its daily window reports it Pending with when the
// window opens (events.WorkloadStatus.WindowOpens). Such a target is
// neither failed nor stuck: the progress deadline does not run while every
// target without a result waits for a window that has not opened, and it
// runs from the latest opening once one has; the runner's target timeout
// runs from the opening (WindowOpensOf).
//
// Device input is hostile: the fold believes only the wait (WindowOpens
// minus Since, both on the device's clock, so a wrong clock changes
// nothing), only in a Pending report, only when it is more than 0 and at
// most MaxWindowWait (a daily window opens within a day), only for a
// revision with a window, and only from a target handed the revision. The
// opening it keeps is on the operator's clock: the stored time plus that
// wait.

// MaxWindowWait is the longest wait for a window the fold believes: a
// daily window opens within a day.
const MaxWindowWait = 24 * time.Hour

// WindowOpening is the opening on the operator's clock that report d,
// stored at stored, claims: stored plus the wait it reports, when it is a
// Pending report of a wait of more than 0 and at most MaxWindowWait;
// zero otherwise. Whether the revision has a window and the device was
// handed it is the caller's to check (Rollout.WindowOpensOf does).
func WindowOpening(d events.WorkloadStatus, stored time.Time) time.Time {
	if d.Phase != events.WorkloadPending || d.WindowOpens == nil || stored.IsZero() {
		return time.Time{}
	}
	wait := d.WindowOpens.Sub(d.Since)
	if wait <= 0 || wait > MaxWindowWait {
		return time.Time{}
	}
	return stored.Add(wait)
}

// windowOpening is WindowOpening of report d, stored at stored, that
// follows prev: the same report sent again (an agent re-sends its last
// report unchanged after a reconnect: the same since) keeps prev's
// opening, which a later stored time would otherwise move.
func (prev DeviceResult) windowOpening(d events.WorkloadStatus, stored time.Time) time.Time {
	at := WindowOpening(d, stored)
	if !at.IsZero() && !prev.WindowOpens.IsZero() && prev.Phase == d.Phase && prev.Since.Equal(d.Since) && prev.Error == d.Error {
		return prev.WindowOpens
	}
	return at
}

// WindowOpensOf is when device's maintenance window opens, on the
// operator's clock, when it is a target handed the revision whose latest
// report waits for the revision's window; zero otherwise.
func (r Rollout) WindowOpensOf(device string) time.Time {
	res, ok := r.Results[device]
	if r.Window == nil || !ok || res.WindowOpens.IsZero() || finished(res.Phase) || !r.IsTarget(device) || r.HandedAt(device).IsZero() {
		return time.Time{}
	}
	return res.WindowOpens
}

// WindowWaiting is how many targets wait for their window (WindowOpensOf
// set) and the earliest of their openings. O(reports).
func (r Rollout) WindowWaiting() (n int, earliest time.Time) {
	if r.Window == nil {
		return 0, time.Time{}
	}
	for dev := range r.Results {
		at := r.WindowOpensOf(dev)
		if at.IsZero() {
			continue
		}
		n++
		if earliest.IsZero() || at.Before(earliest) {
			earliest = at
		}
	}
	return n, earliest
}

// windowClock looks at the targets handed the revision without a result,
// at now: held when at least one waits for a window that has not opened
// and every other one does too; opened is the latest opening at or before
// now of those that waited (zero: none).
func (r Rollout) windowClock(now time.Time) (held bool, opened time.Time) {
	waiting, other := 0, 0
	seen := map[string]bool{}
	for _, d := range r.Released() {
		if seen[d] || finished(r.Results[d].Phase) {
			continue
		}
		seen[d] = true
		at := r.WindowOpensOf(d)
		switch {
		case at.IsZero():
			other++
		case at.After(now):
			waiting++
		default:
			other++ // its window opened: it should switch now
			opened = later(opened, at)
		}
	}
	return waiting > 0 && other == 0, opened
}

// windowStatus is status.window of a revision with a window (nil
// without), and the Progressing message while the waiting targets hold
// the progress deadline.
func (r Rollout) windowStatus(now time.Time) (*fleetv1.WindowStatus, string) {
	if r.Window == nil {
		return nil, ""
	}
	n, earliest := r.WindowWaiting()
	st := &fleetv1.WindowStatus{Waiting: int32(n)}
	if n == 0 {
		return st, ""
	}
	t := metav1.NewTime(earliest)
	st.NextOpening = &t
	if held, _ := r.windowClock(now); !held || now.IsZero() || r.Terminal() {
		return st, ""
	}
	return st, fmt.Sprintf("revision %s: %d targets wait for their maintenance window (%s, device local time), the earliest opens at %s; the progress deadline does not run while they wait",
		r.RevisionID, n, r.Window, earliest.UTC().Format(time.RFC3339))
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

package events

import (
	"fmt"
	"regexp"
	"time"
)

// MaintenanceWindow is a daily window in the device's local time inside
// which a task may start: Start is "HH:MM" (24-hour clock), Duration a Go
// duration from 1m to 24h ("2h", "90m"). A window that crosses midnight
// ("23:00" for "3h") is open until 02:00 the next day. A task that started
// inside the window runs to its end, whatever the time then.
type MaintenanceWindow struct {
	Start    string `json:"start"`
	Duration string `json:"duration"`
}

var windowStart = regexp.MustCompile(`^([01][0-9]|2[0-3]):([0-5][0-9])$`)

// parse returns the window's start (hour, minute) and length.
func (w MaintenanceWindow) parse() (hour, minute int, length time.Duration, err error) {
	m := windowStart.FindStringSubmatch(w.Start)
	if m == nil {
		return 0, 0, 0, fmt.Errorf("maintenance window start %q: give the local time as HH:MM (00:00 to 23:59)", w.Start)
	}
	length, err = time.ParseDuration(w.Duration)
	if err != nil || length < time.Minute || length > 24*time.Hour {
		return 0, 0, 0, fmt.Errorf("maintenance window duration %q: give a duration from 1m to 24h, e.g. 2h", w.Duration)
	}
	hour, minute = int(m[1][0]-'0')*10+int(m[1][1]-'0'), int(m[2][0]-'0')*10+int(m[2][1]-'0')
	return hour, minute, length, nil
}

// Validate checks the window's fields.
func (w MaintenanceWindow) Validate() error {
	_, _, _, err := w.parse()
	return err
}

// Open reports whether the window is open at t (read in t's location: the
// device's local time), and otherwise when it opens next.
func (w MaintenanceWindow) Open(t time.Time) (open bool, next time.Time, err error) {
	hour, minute, length, err := w.parse()
	if err != nil {
		return false, time.Time{}, err
	}
	y, mo, d := t.Date()
	// The window that opened yesterday may still be open (it crosses
	// midnight), or today's; otherwise today's or tomorrow's opens next.
	for _, day := range []int{d - 1, d} {
		start := time.Date(y, mo, day, hour, minute, 0, 0, t.Location())
		if !t.Before(start) && t.Before(start.Add(length)) {
			return true, start, nil
		}
	}
	next = time.Date(y, mo, d, hour, minute, 0, 0, t.Location())
	if !next.After(t) {
		next = time.Date(y, mo, d+1, hour, minute, 0, 0, t.Location())
	}
	return false, next, nil
}

// String is the window as a user writes it.
func (w MaintenanceWindow) String() string { return w.Start + " for " + w.Duration }

package fleetview

import (
	"fmt"
	"time"
)

// HumanDuration writes a duration for people, in its two largest whole
// units, seconds only below a minute: "45s", "9m", "2h 5m", "3d 4h". A zero second unit is left out ("2h", "3d"); below a
// second, and for a negative duration, it is "0s". Every page writes
// durations with it (the dashboard's templates, the alerts' messages).
func HumanDuration(d time.Duration) string {
	if d < time.Second {
		return "0s"
	}
	const day = 24 * time.Hour
	two := func(a int64, ua string, b int64, ub string) string {
		if b == 0 {
			return fmt.Sprintf("%d%s", a, ua)
		}
		return fmt.Sprintf("%d%s %d%s", a, ua, b, ub)
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int64(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int64(d/time.Minute))
	case d < day:
		return two(int64(d/time.Hour), "h", int64(d%time.Hour/time.Minute), "m")
	}
	return two(int64(d/day), "d", int64(d%day/time.Hour), "h")
}

// Ago writes how long before now t was: "9m ago"; "never" for the zero
// time, "just now" for a time not yet a second past.
func Ago(t, now time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	if d < time.Second {
		return "just now"
	}
	return HumanDuration(d) + " ago"
}

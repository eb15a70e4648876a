package fleetview

import (
	"testing"
	"time"
)

func TestDurationsAreWrittenForPeople(t *testing.T) {
	tests := []struct {
		name string
		in   time.Duration
		want string
	}{
		{"an agent up nine minutes and a millisecond is up 9m", 9*time.Minute + 1324712*time.Nanosecond, "9m"},
		{"below a second is 0s", 999 * time.Millisecond, "0s"},
		{"a negative duration is 0s", -time.Hour, "0s"},
		{"seconds below a minute", 45*time.Second + 300*time.Millisecond, "45s"},
		{"minutes drop the seconds", 59*time.Minute + 59*time.Second, "59m"},
		{"hours and minutes", 2*time.Hour + 5*time.Minute + 30*time.Second, "2h 5m"},
		{"whole hours leave the minutes out", 3 * time.Hour, "3h"},
		{"days and hours", 3*24*time.Hour + 4*time.Hour + 59*time.Minute, "3d 4h"},
		{"whole days leave the hours out", 48 * time.Hour, "2d"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := HumanDuration(tc.in); got != tc.want {
				t.Errorf("HumanDuration(%v) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestAgoUsesTheSameDurations(t *testing.T) {
	now := time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		at   time.Time
		want string
	}{
		{"the zero time is never", time.Time{}, "never"},
		{"a time in the future is just now", now.Add(time.Minute), "just now"},
		{"two hours and five minutes ago", now.Add(-2*time.Hour - 5*time.Minute - 10*time.Second), "2h 5m ago"},
		{"three days ago", now.Add(-3 * 24 * time.Hour), "3d ago"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Ago(tc.at, now); got != tc.want {
				t.Errorf("Ago(%v) = %q, want %q", tc.at, got, tc.want)
			}
		})
	}
}

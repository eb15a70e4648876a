package events_test

import (
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

func TestAMaintenanceWindowIsOpenOnlyInsideItsDailyHours(t *testing.T) {
	loc := time.FixedZone("device", 2*3600)
	at := func(d, h, m int) time.Time { return time.Date(2026, 12, d, h, m, 0, 0, loc) }
	tests := []struct {
		name     string
		w        events.MaintenanceWindow
		t        time.Time
		open     bool
		nextOpen time.Time
	}{
		{"inside a night window", events.MaintenanceWindow{Start: "02:00", Duration: "2h"}, at(5, 3, 30), true, at(5, 2, 0)},
		{"at its first minute", events.MaintenanceWindow{Start: "02:00", Duration: "2h"}, at(5, 2, 0), true, at(5, 2, 0)},
		{"at its end it is closed until tomorrow", events.MaintenanceWindow{Start: "02:00", Duration: "2h"}, at(5, 4, 0), false, at(6, 2, 0)},
		{"before it opens today", events.MaintenanceWindow{Start: "02:00", Duration: "2h"}, at(5, 1, 59), false, at(5, 2, 0)},
		{"a window across midnight is open after midnight", events.MaintenanceWindow{Start: "23:00", Duration: "3h"}, at(6, 1, 0), true, at(5, 23, 0)},
		{"a window across midnight is open before midnight", events.MaintenanceWindow{Start: "23:00", Duration: "3h"}, at(5, 23, 30), true, at(5, 23, 0)},
		{"a window across midnight is closed at noon", events.MaintenanceWindow{Start: "23:00", Duration: "3h"}, at(5, 12, 0), false, at(5, 23, 0)},
		{"a 24-hour window is always open", events.MaintenanceWindow{Start: "00:00", Duration: "24h"}, at(5, 17, 42), true, at(5, 0, 0)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			open, next, err := tc.w.Open(tc.t)
			if err != nil {
				t.Fatal(err)
			}
			if open != tc.open || !next.Equal(tc.nextOpen) {
				t.Errorf("Open(%s) = %v, %s; want %v, %s", tc.t, open, next, tc.open, tc.nextOpen)
			}
		})
	}
}

func TestABadMaintenanceWindowNamesTheFieldAndTheFix(t *testing.T) {
	for _, w := range []events.MaintenanceWindow{
		{Start: "2:00", Duration: "2h"}, {Start: "24:00", Duration: "2h"}, {Start: "02:60", Duration: "2h"},
		{Start: "02:00", Duration: "30s"}, {Start: "02:00", Duration: "25h"}, {Start: "02:00", Duration: "two hours"},
	} {
		if err := w.Validate(); err == nil {
			t.Errorf("%+v was accepted", w)
		}
	}
}

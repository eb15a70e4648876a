package agent_test

import (
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/events"
)

// The agent reports in its inventory the time zone it reads maintenance
// windows in: the IANA name of its clock's zone.
func TestTheAgentReportsItsTimeZoneInItsInventory(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skipf("no tz database: %v", err)
	}
	tests := []struct {
		name string
		now  func() time.Time
		want func(t *testing.T, zone string)
	}{
		{"a clock in a named zone reports that zone",
			func() time.Time { return time.Now().In(paris) },
			func(t *testing.T, zone string) {
				if zone != "Europe/Paris" {
					t.Errorf("time zone %q, want Europe/Paris", zone)
				}
			}},
		{"the machine's clock reports the zone time.Local resolves, by its IANA name",
			nil,
			func(t *testing.T, zone string) {
				loc, err := events.LoadTimeZone(zone)
				if err != nil {
					t.Fatalf("time zone %q: %v", zone, err)
				}
				for _, at := range []time.Time{time.Date(2026, 1, 15, 12, 0, 0, 0, time.UTC), time.Date(2026, 7, 15, 12, 0, 0, 0, time.UTC)} {
					_, got := at.In(loc).Zone()
					_, want := at.In(time.Local).Zone()
					if got != want {
						t.Errorf("%s: %s is %d s from UTC, the machine's zone %d s", at, zone, got, want)
					}
				}
			}},
		{"a clock in a zone without an IANA name reports none",
			func() time.Time { return time.Now().In(time.FixedZone("lab", 3600)) },
			func(t *testing.T, zone string) {
				if zone != "" {
					t.Errorf("time zone %q, want none", zone)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := startAgent(t, func(o *agent.Options) { o.Now = tc.now })
			rec, err := e.st.Last(e.ctx, "fleet.report.d1.inventory")
			if err != nil {
				t.Fatal(err)
			}
			inv, err := events.Decode[events.DeviceInventory](rec.Event)
			if err != nil {
				t.Fatal(err)
			}
			tc.want(t, inv.TimeZone)
		})
	}
}

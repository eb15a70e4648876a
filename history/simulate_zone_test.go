package history

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
)

// inventoryRecord is a device's inventory report stored at at.
func inventoryRecord(t *testing.T, device, zone string, at time.Time, seq uint64) events.Record {
	t.Helper()
	ev, err := events.New(events.Keys{Device: device}, events.DeviceInventory{Arch: "arm64", AgentVersion: "v1", TimeZone: zone}, events.WithTime(at))
	if err != nil {
		t.Fatal(err)
	}
	return events.Record{Event: ev, Stored: at, Stream: events.StreamTelemetry, Subject: "fleet.report." + device + ".inventory", Sequence: seq}
}

// TestTheSimulatorReadsEachDevicesWindowInItsReportedTimeZone learns the
// devices' time zones from their inventories (d1 in Tokyo, d3 in Paris,
// d2 none: an older agent) and runs a canary then the release with a
// 02:00 window: each target waits for 02:00 of its own zone, d2 for 02:00
// UTC, and the prediction says one target had no zone.
func TestTheSimulatorReadsEachDevicesWindowInItsReportedTimeZone(t *testing.T) {
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC) // 09:00 in Tokyo, 01:00 in Paris
	s := func(d time.Duration) time.Time { return start.Add(d) }
	recs := []events.Record{
		inventoryRecord(t, "d1", "Asia/Tokyo", start.Add(-time.Hour), 1),
		inventoryRecord(t, "d2", "", start.Add(-time.Hour), 2),
		inventoryRecord(t, "d3", "Europe/Paris", start.Add(-time.Hour), 3),
	}
	m := learn(recs)
	for _, d := range []string{"d1", "d2", "d3"} {
		m.add(d, simSample{dur: 10 * time.Second, outcome: events.WorkloadConverged})
	}
	rev := events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "1-u", Score: json.RawMessage(`{}`),
		Targets: []string{"d1", "d2", "d3"}, Canaries: []string{"d1"}, Window: &events.MaintenanceWindow{Start: "02:00", Duration: "1h"}}
	p, err := simulateRevision("lab", "api", rev, m, SimulateOptions{Start: start})
	if err != nil {
		t.Fatal(err)
	}
	// d1: 02:00 in Tokyo is 17:00 UTC; released at 17:00:10, d3 waits
	// for 02:00 in Paris (01:00 UTC the next day), d2 for 02:00 UTC.
	canary := 17*time.Hour + 10*time.Second
	want := []SimStage{{Name: "rollout", Start: s(0), End: s(26*time.Hour + 10*time.Second), Outcome: "succeeded"},
		{Name: "canary", Start: s(0), End: s(canary), Outcome: "succeeded"},
		{Name: "release", Start: s(canary), End: s(26*time.Hour + 10*time.Second), Outcome: "succeeded"}}
	if diff := cmp.Diff(want, p.Stages); diff != "" {
		t.Errorf("stages (-want +got):\n%s", diff)
	}
	var opens []time.Time
	for _, st := range p.Steps {
		if st.WindowWaiting > 0 {
			opens = append(opens, st.WindowOpens)
		}
	}
	if diff := cmp.Diff([]time.Time{s(17 * time.Hour), s(25 * time.Hour)}, opens); diff != "" {
		t.Errorf("the earliest openings the steps show (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(&SimZones{Reported: 2, None: 1}, p.TimeZones); diff != "" {
		t.Errorf("time zones (-want +got):\n%s", diff)
	}
	if len(p.Assumptions) != 1 || !strings.Contains(p.Assumptions[0], "in UTC for 1 of 3 targets") {
		t.Errorf("assumptions %q: want one saying 1 of 3 targets are read in UTC", p.Assumptions)
	}
}

// TestAHostileTimeZoneIsIgnoredAndCounted: a device's inventory is
// hostile; a time zone that is no IANA name of the tz database (a path
// out of it, the reader's own zone, a control byte, a long name) is
// ignored and counted, the device keeps the last valid zone it reported
// (or none), and nothing stops the learning.
func TestAHostileTimeZoneIsIgnoredAndCounted(t *testing.T) {
	at := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		reports []string // d1's zones, in order
		want    string   // d1's zone ("" none)
		invalid int
	}{
		{"a valid zone is kept", []string{"Europe/Paris"}, "Europe/Paris", 0},
		{"a path out of the tz database is ignored", []string{"../../etc/passwd"}, "", 1},
		{"an absolute path is ignored", []string{"/etc/shadow"}, "", 1},
		{"Local, the reader's zone, is ignored", []string{"Local"}, "", 1},
		{"a terminal escape is ignored", []string{"\x1b]0;pwned\x07"}, "", 1},
		{"a 64 KiB name is ignored", []string{strings.Repeat("Europe/", 9000)}, "", 1},
		{"an unknown zone is ignored", []string{"Mars/Olympus_Mons"}, "", 1},
		{"a hostile zone after a valid one keeps the valid one", []string{"Asia/Tokyo", "../x"}, "Asia/Tokyo", 1},
		{"a later valid zone replaces an earlier one", []string{"Asia/Tokyo", "Europe/Paris"}, "Europe/Paris", 0},
		{"a report without a zone keeps the last one reported", []string{"Asia/Tokyo", ""}, "Asia/Tokyo", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var recs []events.Record
			for i, z := range tc.reports {
				recs = append(recs, inventoryRecord(t, "d1", z, at.Add(time.Duration(i)*time.Minute), uint64(i+1)))
			}
			var warned []string
			l := newLearner()
			l.badZone = func(rec events.Record, err error) { warned = append(warned, err.Error()) }
			for _, rec := range recs {
				l.add(rec)
			}
			got := ""
			if loc, ok := l.m.zones["d1"]; ok {
				got = loc.String()
			}
			if got != tc.want {
				t.Errorf("d1's zone %q, want %q", got, tc.want)
			}
			if l.m.badZones != tc.invalid || len(warned) != tc.invalid {
				t.Errorf("%d invalid zones counted, %d warned, want %d", l.m.badZones, len(warned), tc.invalid)
			}
			for _, w := range warned {
				if strings.ContainsAny(w, "\x1b\x07") || len(w) > 300 {
					t.Errorf("the warning carries a control byte or is long: %q", w)
				}
			}
		})
	}
}

// TestTheSimulatorModelsTheFetchAhead runs a canary and the release on
// fixed answers: every device took 10 s to converge without prefetch (its
// pull in it), and its fetch ahead of an earlier revision took 8 s, after
// which it switched in 2 s. Without prefetch the release takes the whole
// 10 s; with prefetch the targets fetch from the creation and switch in
// 2 s once fetched; a fetch window that opens after the release makes
// them pull while switching again.
func TestTheSimulatorModelsTheFetchAhead(t *testing.T) {
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	s := func(d time.Duration) time.Time { return start.Add(d) }
	m := &simModel{byDevice: map[string][]simSample{}}
	for _, d := range []string{"d1", "d2", "d3"} {
		m.add(d, simSample{dur: 10 * time.Second, outcome: events.WorkloadConverged})
		m.add(d, simSample{dur: 2 * time.Second, outcome: events.WorkloadConverged, split: true, fetch: 8 * time.Second, sw: 2 * time.Second})
		m.addFetch(d, simFetch{dur: 8 * time.Second})
	}
	tests := []struct {
		name     string
		prefetch bool
		window   *events.MaintenanceWindow
		canary   time.Duration // the canary stage's end
		end      time.Duration // the rollout's end
		fetch    *SimFetch
	}{
		{"without prefetch each target pulls while it switches", false, nil, 10 * time.Second, 20 * time.Second, nil},
		{"with prefetch the canary waits for its fetch, the release only switches", true, nil, 10 * time.Second, 12 * time.Second,
			&SimFetch{Fetched: 2, Joined: 1, FirstStart: s(0), LastEnd: s(8 * time.Second)}},
		{"a fetch window that opens after the release makes every target pull while it switches", true,
			&events.MaintenanceWindow{Start: "06:00", Duration: "1h"}, 10 * time.Second, 20 * time.Second,
			&SimFetch{Window: &events.MaintenanceWindow{Start: "06:00", Duration: "1h"}, Unfetched: 3, FirstStart: s(6 * time.Hour), LastEnd: s(6*time.Hour + 8*time.Second)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rev := events.DeploymentRevisionCreated{UID: "u", Generation: 2, RevisionID: "2-u", Score: json.RawMessage(`{}`),
				Targets: []string{"d1", "d2", "d3"}, Canaries: []string{"d1"}, Prefetch: tc.prefetch, FetchWindow: tc.window}
			p, err := simulateRevision("lab", "api", rev, m, SimulateOptions{Start: start})
			if err != nil {
				t.Fatal(err)
			}
			want := []SimStage{{Name: "rollout", Start: s(0), End: s(tc.end), Outcome: "succeeded"},
				{Name: "canary", Start: s(0), End: s(tc.canary), Outcome: "succeeded"},
				{Name: "release", Start: s(tc.canary), End: s(tc.end), Outcome: "succeeded"}}
			if diff := cmp.Diff(want, p.Stages); diff != "" {
				t.Errorf("stages (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.fetch, p.Fetch); diff != "" {
				t.Errorf("fetch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAHostileFetchReportTeachesNothing: a fetch report is device input.
// Only a Fetched report of a revision the device is a target of, with an
// end no earlier than its start and a duration within maxSimFetch, is a
// fetch sample; the first one counts.
func TestAHostileFetchReportTeachesNothing(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	keys := events.Keys{Namespace: "lab", Name: "api"}
	rev := events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "1-u", Score: json.RawMessage(`{}`),
		Targets: []string{"d1", "d2"}, Canaries: []string{"d1"}, Prefetch: true}
	fetch := func(device string, gen int64, phase string, took time.Duration) events.WorkloadFetch {
		ended := t0.Add(took)
		return events.WorkloadFetch{Namespace: "lab", Deployment: "api", UID: "u", Generation: gen, RevisionID: "1-u", Phase: phase,
			Images: 1, Pulled: 1, Started: t0, Ended: &ended}
	}
	tests := []struct {
		name    string
		device  string
		reports []events.WorkloadFetch
		want    []time.Duration // d's fetch samples
	}{
		{"a target's Fetched report is a sample", "d2", []events.WorkloadFetch{fetch("d2", 1, events.FetchDone, 8*time.Second)}, []time.Duration{8 * time.Second}},
		{"only the first Fetched report of a revision counts", "d2",
			[]events.WorkloadFetch{fetch("d2", 1, events.FetchDone, 8*time.Second), fetch("d2", 1, events.FetchDone, time.Second)}, []time.Duration{8 * time.Second}},
		{"a device that is no target of the revision teaches nothing", "d9", []events.WorkloadFetch{fetch("d9", 1, events.FetchDone, time.Second)}, nil},
		{"a report for a revision that does not exist teaches nothing", "d2", []events.WorkloadFetch{fetch("d2", 7, events.FetchDone, time.Second)}, nil},
		{"an end before the start teaches nothing", "d2", []events.WorkloadFetch{fetch("d2", 1, events.FetchDone, -time.Hour)}, nil},
		{"a fetch of ten years teaches nothing", "d2", []events.WorkloadFetch{fetch("d2", 1, events.FetchDone, 10*365*24*time.Hour)}, nil},
		{"a failed fetch teaches nothing", "d2", []events.WorkloadFetch{fetch("d2", 1, events.FetchFailed, time.Second)}, nil},
		{"a started fetch without an end teaches nothing", "d2", []events.WorkloadFetch{{Namespace: "lab", Deployment: "api", UID: "u", Generation: 1,
			RevisionID: "1-u", Phase: events.FetchStarted, Images: 1, Started: t0}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := newLearner()
			ev, err := events.New(keys, rev, events.WithCorrelation("u", 1), events.WithTime(t0))
			if err != nil {
				t.Fatal(err)
			}
			l.add(events.Record{Event: ev, Stored: t0, Stream: events.StreamIntent, Sequence: 1})
			for i, f := range tc.reports {
				ev, err := events.New(events.Keys{Device: tc.device}, f, events.WithCorrelation("u", f.Generation), events.WithTime(t0))
				if err != nil {
					t.Fatal(err)
				}
				l.add(events.Record{Event: ev, Stored: t0.Add(time.Minute), Stream: events.StreamReports, Sequence: uint64(i + 2)})
			}
			var got []time.Duration
			for _, f := range l.m.fetches[tc.device] {
				got = append(got, f.dur)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s's fetch samples (-want +got):\n%s", tc.device, diff)
			}
		})
	}
}

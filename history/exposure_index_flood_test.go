package history

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// floodRecordsPerDevice is the per-device record limit the flood test
// gives the writer: small, so that a flood of a few hundred reports is
// far over it.
const floodRecordsPerDevice = 16

// TestAFloodingDeviceAddsABoundedIndexAndTheAnswersStayTheFullRead is the
// attack on the exposure index (ADR 0033, docs/security.md "What one
// device can cost"): a hostile device floods workload and health reports
// alternating the revisions the intent holds and their phases, naming
// revisions and UIDs no intent holds (one of them created later), or
// with phases as long as a report can hold. What it adds to FLEET_INDEX must
// stay under the per-device bound in records and bytes whatever the
// flood's length, and every exposure answer must stay the full read's,
// the hostile device's included.
func TestAFloodingDeviceAddsABoundedIndexAndTheAnswersStayTheFullRead(t *testing.T) {
	tests := []struct {
		name  string
		flood int
		// kinds are the reports the flood cycles through (flood's
		// switch); prescient sends a report of generation 3 before it
		// exists.
		kinds     []int
		prescient bool
		reason    string // the marker's
	}{
		{"a flood alternating the intent's revisions and phases stops at the limit", 200, []int{0, 1, 2, 5, 7}, false, events.UnindexedLimit},
		{"the same flood four times longer adds no more", 800, []int{0, 1, 2, 5, 7}, false, events.UnindexedLimit},
		{"a flood of revisions and UIDs no intent holds is one marker", 200, []int{0, 1, 3, 4}, false, events.UnindexedUnknownRevision},
		{"a revision reported before it is created is one marker", 200, []int{0, 1, 2}, true, events.UnindexedUnknownRevision},
		{"a flood of phases as long as a report can hold is one marker", 200, []int{0, 1, 6}, false, events.UnindexedTooLarge},
		{"everything at once, four times longer", 800, []int{0, 1, 2, 3, 4, 5, 6, 7}, true, events.UnindexedUnknownRevision},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			_, st := natstest.Provisioned(t)
			w := streamWriter{tb: t, ctx: ctx, st: st}
			writer := &ExposureIndexWriter{Store: st, Batch: 64, MaxRecordsPerDevice: floodRecordsPerDevice}
			catchUp := func() {
				t.Helper()
				if err := writer.RunToEnd(ctx); err != nil {
					t.Fatalf("index writer: %v", err)
				}
			}
			rev := func(gen int64, img string) events.DeploymentRevisionCreated {
				return events.DeploymentRevisionCreated{UID: "uid-api", Generation: gen, RevisionID: fmt.Sprintf("%d-uid-api", gen),
					ScoreDigest: fmt.Sprintf("sha256:api%d", gen),
					Score:       json.RawMessage(fmt.Sprintf(`{"type":"PodmanV0","data":{"services":[{"name":"s","image":"%s"}]}}`, img)),
					Targets:     []string{"d0", "d1", "d2", "evil"}, Canaries: []string{"d0"}}
			}
			status := func(uid string, gen int64, phase events.WorkloadPhase) events.WorkloadStatus {
				return events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: uid, Generation: gen,
					RevisionID: fmt.Sprintf("%d-%s", gen, uid), Phase: phase, Since: time.Now().UTC()}
			}
			degraded := func(device string, gen int64) events.Event {
				ev, err := events.New(events.Keys{Device: device}, events.NewWorkloadHealth(events.TypeWorkloadDegraded,
					events.WorkloadHealth{Namespace: "lab", Deployment: "api", UID: "uid-api", Generation: gen, RevisionID: fmt.Sprintf("%d-uid-api", gen),
						Reason: events.HealthCrashLoop, Window: 60}), events.WithCorrelation("uid-api", gen))
				if err != nil {
					t.Fatal(err)
				}
				return ev
			}
			w.revision("lab", "api", rev(1, "registry.example.com/api:v1"), 0)
			w.revision("lab", "api", rev(2, "registry.example.com/api:v2"), 0)
			for _, d := range []string{"d0", "d1"} {
				w.report(d, status("uid-api", 1, events.WorkloadApplying))
				w.report(d, status("uid-api", 1, events.WorkloadConverged))
			}
			// The hostile device claims generation 3 before it exists, and
			// the writer folds that report before the intent holds it.
			if tc.prescient {
				w.report("evil", status("uid-api", 3, events.WorkloadConverged))
			}
			catchUp()
			w.revision("lab", "api", rev(3, "registry.example.com/api:v3"), 0)
			flood := func(n int) {
				var batch []events.Event
				for i := range n {
					var ev events.Event
					var err error
					switch tc.kinds[i%len(tc.kinds)] {
					case 0:
						ev, err = events.New(events.Keys{Device: "evil"}, status("uid-api", 1, events.WorkloadApplying))
					case 1:
						ev, err = events.New(events.Keys{Device: "evil"}, status("uid-api", 2, events.WorkloadConverged))
					case 2:
						ev, err = events.New(events.Keys{Device: "evil"}, status("uid-api", 1, events.WorkloadFailed))
					case 3:
						ev, err = events.New(events.Keys{Device: "evil"}, status("uid-api", int64(100+i), events.WorkloadConverged))
					case 4:
						ev, err = events.New(events.Keys{Device: "evil"}, status("uid-forged", 2, events.WorkloadApplying))
					case 5:
						ev = degraded("evil", 2)
					case 6:
						ev, err = events.New(events.Keys{Device: "evil"}, status("uid-api", 2, events.WorkloadPhase(strings.Repeat("<", 9_000))))
					default:
						ev, err = events.New(events.Keys{Device: "evil"}, status("uid-api", 3, events.WorkloadRemoved))
					}
					if err != nil {
						t.Fatal(err)
					}
					batch = append(batch, ev)
					if len(batch) == 50 || i == n-1 {
						if err := st.Report(ctx, batch...); err != nil {
							t.Fatal(err)
						}
						batch = batch[:0]
					}
				}
			}
			flood(tc.flood / 2)
			catchUp()
			// The honest devices go on while the flood does.
			for _, d := range []string{"d0", "d1", "d2"} {
				w.report(d, status("uid-api", 2, events.WorkloadApplying))
				if err := st.Report(ctx, degraded(d, 2)); err != nil {
					t.Fatal(err)
				}
				w.report(d, status("uid-api", 2, events.WorkloadConverged))
			}
			flood(tc.flood - tc.flood/2)
			w.report("d2", status("uid-api", 3, events.WorkloadApplying))
			catchUp()

			var records, bytes, markers, honest int
			for _, r := range natstest.ExposureIndex(t, ctx, st) {
				if r.Key.Device != "evil" {
					honest++
					continue
				}
				if r.Record.Kind == events.ExposureUnindexed {
					markers++
					if r.Record.Reason != tc.reason {
						t.Errorf("the hostile device is unindexed for %q, want %q", r.Record.Reason, tc.reason)
					}
				}
				data, err := json.Marshal(r.Record)
				if err != nil {
					t.Fatal(err)
				}
				records++
				bytes += len(r.Subject) + len(data)
			}
			if max := floodRecordsPerDevice + 1; records > max {
				t.Errorf("the hostile device's %d reports added %d index records, want at most %d (the per-device limit and one marker)", tc.flood, records, max)
			}
			if max := (floodRecordsPerDevice + 1) * events.MaxExposureIndexMessage; bytes > max {
				t.Errorf("the hostile device's %d reports added %d bytes to the index, want at most %d", tc.flood, bytes, max)
			}
			if markers != 1 {
				t.Errorf("the hostile device has %d unindexed markers, want 1", markers)
			}
			if honest == 0 {
				t.Fatal("the honest devices have no index record: the answers would not come from the index")
			}
			t.Logf("%d hostile reports: %d records, %d bytes of the hostile device; %d records of the others", tc.flood, records, bytes, honest)

			sameExposure(t, ctx, st, false, []ExposureQuery{
				{Image: "registry.example.com/api:v1"},
				{Image: "registry.example.com/api:v2"},
				{Image: "registry.example.com/api:v3"},
				{Deployment: "lab/api"},
			})
		})
	}
}

// TestTheIndexMessageSizeBoundNeverLetsALargerRecordThrough checks the
// shortcut of indexMessageSize: a record it does not encode (0) is never
// over events.MaxExposureIndexMessage once encoded, at every field's
// longest, with strings JSON escapes six bytes a character.
func TestTheIndexMessageSizeBoundNeverLetsALargerRecordThrough(t *testing.T) {
	subject := "fleet.index.exposure." + strings.Repeat("n", 63) + "." + strings.Repeat("a", 100) + ".-9223372036854775808." + strings.Repeat("d", 64)
	for n := 0; n <= 200; n++ {
		for _, c := range []string{"x", "<", "\x01", "é"} {
			r := events.ExposureIndexRecord{Kind: events.ExposureUnindexed, Source: 1<<64 - 1,
				Stored: time.Date(2026, 12, 31, 23, 59, 59, 999999999, time.UTC), Last: true, UID: strings.Repeat(c, n),
				Event: "01JZZZZZZZZZZZZZZZZZZZZZZZ", Phase: events.WorkloadPhase(strings.Repeat(c, n)), End: EndRolledBack,
				EndGeneration: -1 << 63, Reason: events.UnindexedUnknownRevision}
			w := events.IndexWrite{Subject: subject, Record: r}
			data, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			size := len(subject) + len(data)
			got := indexMessageSize(w)
			if got == 0 && size > events.MaxExposureIndexMessage {
				t.Fatalf("%d × %q: a %d-byte message passes the bound unencoded", n, c, size)
			}
			if got != 0 && got != size {
				t.Fatalf("%d × %q: size %d, encoded %d", n, c, got, size)
			}
		}
	}
}

package history_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
)

// TestTheTimelinesShowATargetWaitingForItsMaintenanceWindow: a target's
// report that it waits for the revision's maintenance window (ADR 0029) is
// on the Deployment's and the device's timeline with when the window opens
// on the operator's clock; the same claim for a revision without a window
// shows no wait.
func TestTheTimelinesShowATargetWaitingForItsMaintenanceWindow(t *testing.T) {
	f := startFleet(t)
	for _, tc := range []struct {
		name   string
		window *events.MaintenanceWindow
		wait   bool
	}{
		{"with-window", &events.MaintenanceWindow{Start: "02:00", Duration: "2h"}, true},
		{"no-window", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev := events.DeploymentRevisionCreated{UID: tc.name + "-uid", Generation: 1, RevisionID: "1-" + tc.name, ScoreDigest: "sha256:w",
				Score: json.RawMessage(`{"type":"PodmanV0"}`), Targets: []string{"edge-" + tc.name}, Canaries: []string{}, Window: tc.window}
			f.append(events.Keys{Namespace: "lab", Name: tc.name}, rev, events.WithCorrelation(rev.UID, 1))
			f.waitPhase(tc.name, 1, "Progressing")
			since := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) // the device's clock is far off
			opens := since.Add(90 * time.Minute)
			d := events.WorkloadStatus{Namespace: "lab", Deployment: tc.name, UID: rev.UID, Generation: 1, RevisionID: rev.RevisionID,
				Phase: events.WorkloadPending, Error: "waiting for the maintenance window", Since: since, WindowOpens: &opens}
			f.append(events.Keys{Device: "edge-" + tc.name}, d, events.WithCorrelation(rev.UID, 1))
			h, err := history.New(history.Options{Reader: f.store})
			if err != nil {
				t.Fatal(err)
			}
			dtl, err := h.Deployment(f.ctx, "lab", tc.name)
			if err != nil {
				t.Fatal(err)
			}
			vtl, err := h.Device(f.ctx, "edge-"+tc.name)
			if err != nil {
				t.Fatal(err)
			}
			for what, entries := range map[string][]history.Entry{"Deployment": dtl.Entries, "device": vtl.Entries} {
				var report *history.Entry
				for i := range entries {
					if entries[i].Type == events.TypeWorkloadStatus {
						report = &entries[i]
					}
				}
				if report == nil {
					t.Fatalf("no report on the %s timeline", what)
				}
				const says = "waits for its maintenance window, which opens at "
				if got := strings.Contains(report.Summary, says); got != tc.wait {
					t.Errorf("%s timeline: %q; says it waits: %v, want %v", what, report.Summary, got, tc.wait)
				}
				if tc.wait {
					at := report.Time.Add(90 * time.Minute).UTC().Format(time.RFC3339)
					if !strings.Contains(report.Summary, says+at) {
						t.Errorf("%s timeline: %q does not name the opening %s", what, report.Summary, at)
					}
				}
			}
		})
	}
}

package history_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/projections"
)

// scenario drives a live fleet through a canary → release → success rollout
// (api, generation 1), a failed canary (web), a second revision of api that
// drops a device, and the deletion of api, recording the live state after
// each. It returns the fleet and the instants, oldest first.
func scenario(t *testing.T) (*fleetRun, []instant) {
	f := startFleet(t)
	dep := func(name string) events.Keys { return events.Keys{Namespace: "lab", Name: name} }
	var at []instant
	for _, d := range []string{"edge-1", "edge-2", "edge-3"} {
		f.append(events.Keys{Device: d}, events.DeviceInventory{OS: "linux", Arch: "arm64", Kernel: "6.1", AgentVersion: "0.1.0",
			Labels: map[string]string{"role": "analyzer"}})
		f.append(events.Keys{Device: d}, events.DeviceHeartbeat{AgentVersion: "0.1.0", Uptime: time.Minute})
	}

	// T1: api generation 1 is at its canary stage.
	api1 := f.revision("api", "a9f1-uid", 1, []string{"edge-1", "edge-2", "edge-3"}, []string{"edge-1"})
	f.waitPhase("api", 1, fleetv1.PhaseCanary)
	f.waitFor("the canary's intent", func() bool { return f.intentGen("edge-1", "api") == 1 })
	at = append(at, f.record("api canary stage"))

	// T2: the canary converged, the rest was released and converged.
	f.report("edge-1", "api", api1, events.WorkloadConverged, "", time.Now())
	f.waitPhase("api", 1, fleetv1.PhaseProgressing)
	f.report("edge-2", "api", api1, events.WorkloadApplying, "", time.Now())
	f.report("edge-2", "api", api1, events.WorkloadConverged, "", time.Now())
	f.report("edge-3", "api", api1, events.WorkloadConverged, "", time.Now())
	f.waitPhase("api", 1, fleetv1.PhaseSucceeded)
	// A clock an hour behind: still edge-2's latest report (stream order);
	// the rollout stays Succeeded, the counts say edge-2 is applying again.
	f.report("edge-2", "api", api1, events.WorkloadApplying, "", time.Now().Add(-time.Hour))
	f.waitFor("api's counts to take edge-2's latest report", func() bool {
		st, ok := f.statuses.get("lab", "api")
		return ok && st.Counts.Succeeded == 2 && st.Counts.Pending == 1
	})
	f.append(events.Keys{Device: "edge-3"}, events.DeviceHeartbeat{AgentVersion: "0.1.0", Uptime: 2 * time.Minute})
	at = append(at, f.record("api succeeded"))

	// T3: web's canary failed; api generation 2 drops edge-3 and succeeded.
	web1 := f.revision("web", "7c2e-uid", 1, []string{"edge-1", "edge-2", "edge-3"}, []string{"edge-2"})
	f.waitPhase("web", 1, fleetv1.PhaseCanary)
	f.report("edge-2", "web", web1, events.WorkloadFailed, "init container exited with 3", time.Now())
	f.waitPhase("web", 1, fleetv1.PhaseFailed)
	api2 := f.revision("api", "a9f1-uid", 2, []string{"edge-1", "edge-2"}, []string{"edge-1"})
	f.waitPhase("api", 2, fleetv1.PhaseCanary)
	f.report("edge-3", "api", api1, events.WorkloadRemoved, "", time.Now()) // an older revision: ignored by the rollout
	f.report("edge-1", "api", api2, events.WorkloadConverged, "", time.Now())
	f.waitPhase("api", 2, fleetv1.PhaseProgressing)
	f.report("edge-2", "api", api2, events.WorkloadConverged, "", time.Now())
	f.waitPhase("api", 2, fleetv1.PhaseSucceeded)
	cmd := f.append(events.Keys{Device: "edge-3"}, events.AgentCommand{Command: "report-inventory", RequestedBy: "ops"})
	f.append(events.Keys{Device: "edge-3"}, events.CommandResult{CommandID: cmd.ID.String(), Command: "report-inventory", OK: true})
	// Who read edge-3's logs (FLEET_AUDIT): an allowed follow from the
	// CLI, a refused diagnosis from the dashboard, and a dashboard action
	// on the same subject, which the device timeline does not show.
	f.append(events.Keys{Device: "edge-3"}, events.DeviceLogsRequested{Namespace: "lab", Deployment: "api", Service: "web", User: "ada",
		Via: events.ViaCLI, Request: strings.Repeat("a", events.LogsIDLength), Tail: 50, Follow: true, Allowed: true})
	f.append(events.Keys{Device: "edge-3"}, events.DeviceLogsRequested{Namespace: "lab", User: "grace", Via: events.ViaDashboard,
		Request: strings.Repeat("b", events.LogsIDLength), Diagnose: true, Reason: "reading logs on the dashboard is for fleet-admin"})
	f.append(events.Keys{Device: "edge-3"}, events.DashboardDeviceAction{Action: events.ActionQuarantine, Namespace: "lab", User: "ada", UserSubject: "u-1"})
	f.append(events.Keys{Device: "edge-3"}, events.DeviceInventory{OS: "linux", Arch: "arm64", Kernel: "6.1", AgentVersion: "0.1.0",
		Labels: map[string]string{"role": "analyzer"}}) // unchanged: not a change
	f.append(events.Keys{Device: "edge-3"}, events.DeviceInventory{OS: "linux", Arch: "arm64", Kernel: "6.6", AgentVersion: "0.2.0",
		Labels: map[string]string{"role": "analyzer"}})
	at = append(at, f.record("web failed, api generation 2 succeeded"))

	// T4: api was deleted.
	f.append(dep("api"), events.DeploymentDeleted{UID: "a9f1-uid", Generation: 2}, events.WithCorrelation("a9f1-uid", 2))
	f.waitFor("api's intent removed", func() bool { return f.intentGen("edge-1", "api") == 0 && f.intentGen("edge-2", "api") == 0 })
	at = append(at, f.record("api deleted"))
	return f, at
}

// TestTheFleetAtAPastTimeIsWhatWasLiveThen drives a live fleet with the
// operator's rollout runner, records the KV projection, the Deployment
// status and the agents' reports at several instants, and expects
// FleetAt(T) to give exactly what was live at T.
func TestTheFleetAtAPastTimeIsWhatWasLiveThen(t *testing.T) {
	f, instants := scenario(t)
	h, err := history.New(history.Options{Reader: f.store})
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range instants {
		t.Run(in.name, func(t *testing.T) {
			if len(in.intents) == 0 || len(in.statuses) == 0 {
				t.Fatalf("nothing was live at %s: the comparison would prove nothing", in.name)
			}
			fs, err := h.FleetAt(f.ctx, in.at)
			if err != nil {
				t.Fatal(err)
			}
			// Desired: every device's fleet-intent value, byte for byte
			// the same entries.
			gotIntents := map[string][]events.IntentEntry{}
			gotReported := map[string][]history.Report{}
			for _, d := range fs.Devices {
				if len(d.Desired) > 0 {
					gotIntents[d.Device] = d.Desired
				}
				if len(d.Reported) > 0 {
					gotReported[d.Device] = d.Reported
				}
			}
			if diff := cmp.Diff(in.intents, gotIntents); diff != "" {
				t.Errorf("desired state (-live KV +history):\n%s", diff)
			}
			if diff := cmp.Diff(in.reported, gotReported, cmpopts.IgnoreFields(history.Report{}, "Stored")); diff != "" {
				t.Errorf("reported state (-agents +history):\n%s", diff)
			}
			// Rollout state: what the operator patched into each status.
			if len(fs.Deployments) != len(in.statuses) {
				t.Errorf("%d Deployments in history, %d statuses live", len(fs.Deployments), len(in.statuses))
			}
			for _, d := range fs.Deployments {
				live, ok := in.statuses[d.Namespace+"/"+d.Name]
				if !ok {
					t.Errorf("history has %s/%s, never patched live", d.Namespace, d.Name)
					continue
				}
				if d.Deleted {
					// The runner stops patching a deleted Deployment: its
					// last status stays, for the revision history names.
					if live.Revision.Generation != d.Generation {
						t.Errorf("deleted %s: history generation %d, last live status %d", d.Name, d.Generation, live.Revision.Generation)
					}
					continue
				}
				if diff := cmp.Diff(fromStatus(live), fromState(d)); diff != "" {
					t.Errorf("%s status (-live +history):\n%s", d.Name, diff)
				}
			}
		})
	}
	t.Run("a time before the first event has no events", func(t *testing.T) {
		_, err := h.FleetAt(f.ctx, instants[0].at.Add(-time.Hour))
		if !errors.Is(err, history.ErrNoEvents) {
			t.Fatalf("error %v, want ErrNoEvents", err)
		}
	})
	t.Run("the last instant shows api deleted and web failed at its canary", func(t *testing.T) {
		fs, err := h.FleetAt(f.ctx, instants[3].at)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := history.Write(&buf, fs, history.FormatText); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"lab/api", "Deleted", "lab/web", "Failed", "edge-2", "init container exited with 3"} {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("text lacks %q:\n%s", want, buf.String())
			}
		}
	})
}

// statusView is the part of a Deployment status the rollout projection
// owns, in comparable form (the API server keeps times to the second).
type statusView struct {
	Phase                     string
	UID                       string
	Generation                int64
	RevisionID                string
	Counts                    events.RolloutCounts
	Ready, Reason, Message    string
	Since                     time.Time
	FailedDevice, FailedError string
	FailedAt                  time.Time
}

func fromStatus(st fleetv1.DeploymentStatus) statusView {
	v := statusView{Phase: string(st.Phase)}
	if st.Revision != nil {
		v.UID, v.Generation, v.RevisionID = st.Revision.UID, st.Revision.Generation, st.Revision.ID
	}
	c := st.Counts
	v.Counts = events.RolloutCounts{Total: int(c.Total), Succeeded: int(c.Succeeded), Pending: int(c.Pending), Failed: int(c.Failed),
		Canaries: int(c.Canaries), CanariesSucceeded: int(c.CanariesSucceeded), CanariesFailed: int(c.CanariesFailed)}
	if r := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionReady); r != nil {
		v.Ready, v.Reason, v.Message, v.Since = string(r.Status), r.Reason, r.Message, r.LastTransitionTime.UTC()
	}
	if lf := st.LatestFailure; lf != nil {
		v.FailedDevice, v.FailedError, v.FailedAt = lf.Device, lf.Error, lf.Time.UTC()
	}
	return v
}

func fromState(s history.RolloutState) statusView {
	v := statusView{Phase: s.Phase, UID: s.UID, Generation: s.Generation, RevisionID: s.RevisionID, Counts: s.Counts,
		Ready: s.Ready, Reason: s.Reason, Message: s.Message, Since: s.Since.Truncate(time.Second)}
	if lf := s.LatestFailure; lf != nil {
		v.FailedDevice, v.FailedError, v.FailedAt = lf.Device, lf.Error, lf.Time.Truncate(time.Second)
	}
	return v
}

// TestTimelinesTellWhatHappened reads the Deployment and device timelines of
// the same live run.
func TestTimelinesTellWhatHappened(t *testing.T) {
	f, _ := scenario(t)
	h, err := history.New(history.Options{Reader: f.store})
	if err != nil {
		t.Fatal(err)
	}
	ctx := f.ctx

	t.Run("api's timeline has both revisions, every transition and report in order", func(t *testing.T) {
		tl, err := h.Deployment(ctx, "lab", "api")
		if err != nil {
			t.Fatal(err)
		}
		got := typesAndDevices(tl.Entries)
		want := []string{
			"deployment.revision.created", "rollout.started", "rollout.canary-stage",
			"device.workload.status edge-1", "rollout.canaries-converged", "rollout.released",
			"device.workload.status edge-2", "device.workload.status edge-2", "device.workload.status edge-3", "rollout.succeeded",
			"device.workload.status edge-2",
			"deployment.revision.created", "rollout.started", "rollout.canary-stage",
			"device.workload.status edge-3", "device.workload.status edge-1", "rollout.canaries-converged", "rollout.released",
			"device.workload.status edge-2", "rollout.succeeded",
			"deployment.deleted",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("timeline (-want +got):\n%s", diff)
		}
		for i := 1; i < len(tl.Entries); i++ {
			if tl.Entries[i].Time.Before(tl.Entries[i-1].Time) {
				t.Errorf("entry %d stored before entry %d", i, i-1)
			}
		}
		if e := tl.Entries[10]; e.Ignored != "" {
			t.Errorf("the report with an earlier clock is marked ignored; stream order makes it the latest: %+v", e)
		}
		if e := tl.Entries[14]; !strings.Contains(e.Ignored, "older revision") {
			t.Errorf("the report of generation 1 during generation 2 is not marked ignored: %+v", e)
		}
		if tl.Entries[9].Stage != projections.StageSucceeded || tl.Entries[2].Stage != projections.StageCanary {
			t.Errorf("stages after events: %q, %q", tl.Entries[2].Stage, tl.Entries[9].Stage)
		}
		if len(tl.Revisions) != 2 {
			t.Fatalf("%d revisions", len(tl.Revisions))
		}
		r1 := tl.Revisions[0]
		if !slices.Equal(r1.Targets, []string{"edge-1", "edge-2", "edge-3"}) || !slices.Equal(r1.Canaries, []string{"edge-1"}) {
			t.Errorf("revision 1 frozen sets %v %v", r1.Targets, r1.Canaries)
		}
		// edge-2's last Applying report is its latest (stream order), its
		// earlier clock notwithstanding; edge-3 removed revision 1 once
		// revision 2 dropped it.
		wantResults := []history.DeviceResult{
			{Device: "edge-1", Canary: true, Phase: events.WorkloadConverged, Reports: 1},
			{Device: "edge-2", Phase: events.WorkloadApplying, Reports: 3},
			{Device: "edge-3", Phase: events.WorkloadRemoved, Reports: 2},
		}
		if diff := cmp.Diff(wantResults, r1.Results, cmpopts.IgnoreFields(history.DeviceResult{}, "Since", "ReportID")); diff != "" {
			t.Errorf("revision 1 results (-want +got):\n%s", diff)
		}
		if r2 := tl.Revisions[1]; !slices.Equal(r2.Targets, []string{"edge-1", "edge-2"}) || len(r2.Results) != 2 {
			t.Errorf("revision 2 %+v", r2)
		}
		if tl.State == nil || !tl.State.Deleted || tl.State.Generation != 2 || tl.State.Stage != projections.StageSucceeded {
			t.Errorf("final state %+v", tl.State)
		}
	})

	t.Run("web's timeline ends with the failed canary and release blocked", func(t *testing.T) {
		tl, err := h.Deployment(ctx, "lab", "web")
		if err != nil {
			t.Fatal(err)
		}
		var got []events.Type
		for _, e := range tl.Entries {
			got = append(got, e.Type)
		}
		want := []events.Type{events.TypeDeploymentRevisionCreated, events.TypeRolloutStarted, events.TypeRolloutCanaryStage,
			events.TypeWorkloadStatus, events.TypeRolloutCanaryFailed, events.TypeRolloutFailed}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("timeline (-want +got):\n%s", diff)
		}
		s := tl.State
		if s == nil || s.Phase != string(fleetv1.PhaseFailed) || s.Reason != fleetv1.ReasonCanaryFailed || s.LatestFailure == nil ||
			s.LatestFailure.Device != "edge-2" || s.LatestFailure.Error != "init container exited with 3" {
			t.Errorf("state %+v", s)
		}
		var buf bytes.Buffer
		if err := history.Write(&buf, tl, history.FormatText); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"canary edge-2 failed: init container exited with 3; release blocked", "REVISIONS", "RESULTS", "TIMELINE"} {
			if !strings.Contains(buf.String(), want) {
				t.Errorf("text lacks %q:\n%s", want, buf.String())
			}
		}
	})

	t.Run("edge-3's timeline has its intents, reports, inventory changes and commands with heartbeats summarised", func(t *testing.T) {
		tl, err := h.Device(ctx, "edge-3")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range tl.Entries {
			got = append(got, string(e.Type)+": "+e.Summary)
		}
		want := []string{
			"device.inventory: inventory: linux/arm64 kernel 6.1 agent 0.1.0 labels role=analyzer",
			"deployment.revision.created: lab/api revision 1-a9f1 (generation 1) freezes it as a target",
			"history.intent-changed: intent changed by rollout.released: +lab/api generation 1 (1-a9f1)",
			"device.workload.status: lab/api generation 1: Converged",
			"deployment.revision.created: lab/web revision 1-7c2e (generation 1) freezes it as a target",
			"history.intent-changed: intent changed by deployment.revision.created: -lab/api (nothing left to run: key deleted)",
			"device.workload.status: lab/api generation 1: Removed",
			"agent.command: command report-inventory requested by ops",
			"device.command.result: command report-inventory (" + tl.Entries[7].ID + "): ok",
			"device.logs.requested: ada read the log of lab/api/web via cli (tail 50, follow)",
			"device.logs.requested: grace was refused a diagnosis via dashboard: reading logs on the dashboard is for fleet-admin",
			"device.inventory: inventory changed: kernel 6.1 → 6.6; agent 0.1.0 → 0.2.0",
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("timeline (-want +got):\n%s", diff)
		}
		// FLEET_LIVENESS keeps the last heartbeat only (ADR 0024).
		if hb := tl.Heartbeats; hb.Count != 1 || !slices.Equal(hb.AgentVersions, []string{"0.1.0"}) || hb.Uptime != 2*time.Minute {
			t.Errorf("heartbeats %+v", hb)
		}
		if len(tl.Intent) != 0 {
			t.Errorf("edge-3 should have nothing to run, has %+v", tl.Intent)
		}
	})

	t.Run("edge-2 still runs web's canary revision after api's deletion", func(t *testing.T) {
		tl, err := h.Device(ctx, "edge-2")
		if err != nil {
			t.Fatal(err)
		}
		if len(tl.Intent) != 1 || tl.Intent[0].Name != "web" || tl.Intent[0].Generation != 1 {
			t.Errorf("intent %+v", tl.Intent)
		}
	})
}

func TestBadQuestionsGetErrorsThatSayWhy(t *testing.T) {
	f := startFleet(t)
	f.append(events.Keys{Namespace: "lab", Name: "api"}, events.DeploymentRevisionCreated{UID: "u", Generation: 1, RevisionID: "1-u",
		Score: []byte(`{}`), Targets: []string{"edge-1"}})
	h, err := history.New(history.Options{Reader: f.store})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		ask     func() error
		is      error
		mention string
	}{
		{"an unknown Deployment has no events", func() error { _, err := h.Deployment(f.ctx, "lab", "nope"); return err },
			history.ErrNoEvents, "lab/nope"},
		{"a Deployment name with a dot is refused", func() error { _, err := h.Deployment(f.ctx, "lab", "a.b"); return err },
			events.ErrInvalidToken, "a.b"},
		{"an unknown device has no events", func() error { _, err := h.Device(f.ctx, "edge-9"); return err },
			history.ErrNoEvents, "edge-9"},
		{"a device id with a wildcard is refused", func() error { _, err := h.Device(f.ctx, "edge-*"); return err },
			events.ErrInvalidToken, "edge-*"},
		{"a zero time is refused", func() error { _, err := h.FleetAt(f.ctx, time.Time{}); return err }, nil, "zero"},
		{"an unknown format is refused", func() error { _, err := history.ParseFormat("yaml"); return err },
			history.ErrUnknownFormat, "text or json"},
		{"options without a reader are refused", func() error { _, err := history.New(history.Options{}); return err },
			history.ErrInvalidOptions, "Reader"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.ask()
			if err == nil {
				t.Fatal("no error")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}

// typesAndDevices renders a timeline as its entry types, a workload
// status followed by its device.
func typesAndDevices(entries []history.Entry) []string {
	var out []string
	for _, e := range entries {
		s := string(e.Type)
		if e.Type == events.TypeWorkloadStatus {
			s += " " + e.Device
		}
		out = append(out, s)
	}
	return out
}

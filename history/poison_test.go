package history_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// poison stores every poison variant of base's subject, as a device (or a
// JetStream answer aimed by the reply trick) can, and returns how many it
// stored and their sequences.
func (f *fleetRun) poison(base events.Event) (int, map[uint64]bool) {
	f.t.Helper()
	subject, err := base.Subject()
	if err != nil {
		f.t.Fatal(err)
	}
	seqs := map[uint64]bool{}
	cases := poisontest.For(f.t, base)
	for _, tc := range cases {
		seqs[f.storeRaw(&nats.Msg{Subject: subject, Data: tc.Payload})] = true
	}
	return len(cases), seqs
}

// storeRaw stores m as any publisher on its subject could and returns its
// sequence: a JetStream publish on the control plane's streams; on a
// device's report subjects, a core publish as a device's (those streams
// never acknowledge), waited for until stored.
func (f *fleetRun) storeRaw(m *nats.Msg) uint64 {
	f.t.Helper()
	if natstest.DeviceWritten(m.Subject) {
		return natstest.PublishStored(f.t, f.store.JetStream().Conn(), m)
	}
	ack, err := f.store.JetStream().PublishMsg(f.ctx, m)
	if err != nil {
		f.t.Fatal(err)
	}
	return ack.Sequence
}

func mustEvent(t *testing.T, keys events.Keys, d events.Data) events.Event {
	t.Helper()
	ev, err := events.New(keys, d)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestHistorySkipsAndCountsRecordsThatDoNotDecode(t *testing.T) {
	f := startFleet(t)
	dep := events.Keys{Namespace: "lab", Name: "api"}
	api := f.revision("api", "a9f1-uid", 1, []string{"edge-1", "edge-2"}, []string{"edge-1"})
	f.waitPhase("api", 1, fleetv1.PhaseCanary)

	// Poison on every stream history reads, while the live runner runs.
	nIntent, _ := f.poison(mustEvent(t, dep, events.DeploymentRevisionCreated{UID: "a9f1-uid", Generation: 1}))
	nRollout, _ := f.poison(mustEvent(t, dep, events.NewRolloutTransition(events.TypeRolloutStarted, events.RolloutTransition{UID: "a9f1-uid", Generation: 1})))
	nWorkload, workloadSeqs := f.poison(mustEvent(t, events.Keys{Device: "edge-2"}, events.WorkloadStatus{Namespace: "lab", Deployment: "api",
		UID: "a9f1-uid", Generation: 1, Phase: events.WorkloadFailed}))
	f.poison(mustEvent(t, events.Keys{Device: "edge-2"}, events.DeviceHeartbeat{AgentVersion: "1"}))
	f.poison(mustEvent(t, events.Keys{Device: "edge-2"}, events.DeviceInventory{OS: "linux"}))
	nCommand, _ := f.poison(mustEvent(t, events.Keys{Device: "edge-2"}, events.AgentCommand{Command: "reconcile-now"}))
	// edge-2 reports, on its own subject, that canary edge-1 converged.
	forged := mustEvent(t, events.Keys{Device: "edge-1"}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: api.UID,
		Generation: 1, RevisionID: api.RevisionID, Phase: events.WorkloadConverged, Since: time.Now().UTC()})
	payload, _ := forged.Marshal()
	workloadSeqs[f.storeRaw(&nats.Msg{Subject: "fleet.report.edge-2.workload", Data: payload})] = true

	f.report("edge-1", "api", api, events.WorkloadConverged, "", time.Now())
	f.waitPhase("api", 1, fleetv1.PhaseProgressing)
	f.report("edge-2", "api", api, events.WorkloadConverged, "", time.Now())
	f.waitPhase("api", 1, fleetv1.PhaseSucceeded)

	var logs testenv.SyncBuffer
	query := func() (*history.History, *events.SkipCounter) {
		skips := events.NewSkipCounter()
		h, err := history.New(history.Options{Reader: f.store, Skips: skips,
			Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		if err != nil {
			t.Fatal(err)
		}
		return h, skips
	}

	t.Run("a Deployment's timeline leaves out and counts every undecodable record and the forged report", func(t *testing.T) {
		h, skips := query()
		tl, err := h.Deployment(f.ctx, "lab", "api")
		if err != nil {
			t.Fatal(err)
		}
		got := typesAndDevices(tl.Entries)
		want := []string{"deployment.revision.created", "rollout.started", "rollout.canary-stage", "device.workload.status edge-1",
			"rollout.canaries-converged", "rollout.released", "device.workload.status edge-2", "rollout.succeeded"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("timeline (-want +got):\n%s", diff)
		}
		counts := map[string]uint64{}
		for _, s := range []string{events.StreamIntent, events.StreamRollout, events.StreamReports} {
			counts[s] = skips.Skipped(s, "")
		}
		wantCounts := map[string]uint64{events.StreamIntent: uint64(nIntent), events.StreamRollout: uint64(nRollout),
			events.StreamReports: uint64(nWorkload + 1)}
		if diff := cmp.Diff(wantCounts, counts); diff != "" {
			t.Errorf("skipped records (-want +got):\n%s", diff)
		}
		if n := skips.Skipped(events.StreamReports, events.ReasonSubjectMismatch); n != 3 {
			t.Errorf("%d reports skipped for naming another subject, want 3 (another device's keys, another kind's type, the forged report)", n)
		}
		if tl.State == nil || tl.State.Phase != string(fleetv1.PhaseSucceeded) {
			t.Errorf("state %+v", tl.State)
		}
	})

	t.Run("a device's timeline leaves out and counts its undecodable reports and commands", func(t *testing.T) {
		h, skips := query()
		tl, err := h.Device(f.ctx, "edge-2")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tl.Entries {
			if e.Stream == events.StreamReports && workloadSeqs[e.Sequence] {
				t.Errorf("entry %+v is an undecodable or forged record", e)
			}
		}
		// The telemetry stream keeps the last 5 per subject: the last 5
		// inventory poison records; the liveness stream the last
		// heartbeat poison record (ADR 0024).
		got := map[string]uint64{events.StreamReports: skips.Skipped(events.StreamReports, ""),
			events.StreamTelemetry: skips.Skipped(events.StreamTelemetry, ""), events.StreamLiveness: skips.Skipped(events.StreamLiveness, ""),
			events.StreamCommands: skips.Skipped(events.StreamCommands, "")}
		want := map[string]uint64{events.StreamReports: uint64(nWorkload + 1), events.StreamTelemetry: 5, events.StreamLiveness: 1, events.StreamCommands: uint64(nCommand)}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("skipped records (-want +got):\n%s", diff)
		}
		if len(tl.Intent) != 1 || tl.Intent[0].Name != "api" {
			t.Errorf("intent %+v", tl.Intent)
		}
	})

	t.Run("the fleet at a time is folded past every undecodable record", func(t *testing.T) {
		h, skips := query()
		fs, err := h.FleetAt(f.ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if len(fs.Deployments) != 1 || fs.Deployments[0].Phase != string(fleetv1.PhaseSucceeded) {
			t.Errorf("deployments %+v", fs.Deployments)
		}
		if skips.Skipped(events.StreamReports, "") == 0 || skips.Skipped(events.StreamRollout, "") == 0 {
			t.Error("nothing was counted")
		}
	})

	t.Run("the warnings name where each record is and never quote it", func(t *testing.T) {
		l := logs.String()
		if !containsAll(l, "undecodable record skipped", "stream=FLEET_REPORTS", "subject=fleet.report.edge-2.workload", "seq=", "reason=subject-mismatch", "bytes=") {
			t.Errorf("warnings:\n%.2000s", l)
		}
		for _, quoted := range []string{"not json", "device.selfie", "AAAAAAAA", "tttttttt", "FLEET_REPORTS\",\"seq"} {
			if strings.Contains(l, quoted) {
				t.Errorf("a warning quotes a payload (%q)", quoted)
			}
		}
		if len(l) > 200_000 {
			t.Errorf("%d bytes of warnings: a payload is in them", len(l))
		}
	})
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

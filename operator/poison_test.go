package operator_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

// publishRaw stores payload on subject as a device (or a JetStream answer
// aimed by the reply trick) can: no envelope checks on the way in. It
// returns the stream sequence. On a device's report subject it is a core
// publish, as a device's (those streams never acknowledge), waited for
// until stored.
func (e *env) publishRaw(subject string, payload []byte) uint64 {
	e.t.Helper()
	m := &nats.Msg{Subject: subject, Data: payload}
	if natstest.DeviceWritten(subject) {
		return natstest.PublishStored(e.t, e.store.JetStream().Conn(), m)
	}
	ack, err := e.store.JetStream().PublishMsg(e.ctx, m)
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Sequence
}

// publishReports core-publishes reports as devices do, without waiting for
// them to be stored: for reports that race others on the same subjects,
// which a wait for the subject's last record could miss. The caller
// confirms them by their effect.
func (e *env) publishReports(msgs ...*nats.Msg) error {
	nc := e.store.JetStream().Conn()
	for i, m := range msgs {
		if err := nc.PublishMsg(m); err != nil {
			return fmt.Errorf("report %d on %s: %w", i, m.Subject, err)
		}
	}
	return nc.FlushTimeout(natstest.StoreWait)
}

// reportUnconfirmed is report, published with publishReports: confirmed by
// the caller, by its effect.
func (e *env) reportUnconfirmed(device, deployment string, rev events.DeploymentRevisionCreated, phase events.WorkloadPhase, errText string) {
	e.t.Helper()
	m, err := events.Message(e.workloadReport(device, deployment, rev, phase, errText))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := e.publishReports(m); err != nil {
		e.t.Fatal(err)
	}
}

// workloadEvent is a workload report of device for rev, as an agent builds
// it; keys names the device the envelope claims.
func (e *env) workloadEvent(keys string, rev events.DeploymentRevisionCreated, phase events.WorkloadPhase) events.Event {
	e.t.Helper()
	ev, err := events.New(events.Keys{Device: keys}, events.WorkloadStatus{Namespace: e.ns, Deployment: "api", UID: rev.UID,
		Generation: rev.Generation, RevisionID: rev.RevisionID, Phase: phase, Error: "forged", Since: time.Now().UTC()},
		events.WithCorrelation(rev.UID, rev.Generation))
	if err != nil {
		e.t.Fatal(err)
	}
	return ev
}

func marshal(t *testing.T, ev events.Event) []byte {
	t.Helper()
	b, err := ev.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkpointSeqs reads the stream positions of the runner's checkpoint:
// intent, rollout, reports.
func (e *env) checkpointSeqs() [3]uint64 {
	e.t.Helper()
	b, err := e.obj.GetBytes(e.ctx, operator.CheckpointObject)
	if err != nil {
		e.t.Fatal(err)
	}
	var c struct {
		Seqs [3]uint64 `json:"seqs"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		e.t.Fatal(err)
	}
	return c.Seqs
}

// canaryRollout creates a canary rpi-1 and the other devices (role
// analyzer), starts an operator and applies Deployment api: the setup of
// the poison tests. It returns the operator's stop and revision 1.
func (e *env) canaryRollout(others ...string) (stop func(), rev events.DeploymentRevisionCreated) {
	e.t.Helper()
	e.device("rpi-1", map[string]string{"role": "analyzer", "canary": "true"})
	for _, d := range others {
		e.device(d, map[string]string{"role": "analyzer"})
	}
	stop = e.startOperator()
	e.deployment("api", map[string]string{"role": "analyzer"})
	return stop, e.revisionOf("api", 1)
}

var fullRollout = []events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanariesConverged,
	events.TypeRolloutReleased, events.TypeRolloutSucceeded}

func TestPoisonReportsAreSkippedCountedAndTheRolloutCompletesAcrossRestarts(t *testing.T) {
	e := newEnv(t)
	e.logs = slog.DiscardHandler // a warning per poison record
	e.skips = events.NewSkipCounter()
	stop, rev := e.canaryRollout("rpi-2")
	e.waitFor("the canary's intent", func() bool { return e.intentOf("rpi-1", "api") == 1 })

	// Every variant of the canary's own report, built on a Failed report:
	// one accepted by mistake would fail the rollout.
	cases := poisontest.For(t, e.workloadEvent("rpi-1", rev, events.WorkloadFailed))
	wantReasons := map[events.SkipReason]uint64{}
	var lastReport uint64
	for _, tc := range cases {
		lastReport = e.publishRaw("fleet.report.rpi-1.workload", tc.Payload)
		wantReasons[tc.Reason]++
	}
	// A JetStream acknowledgement aimed at the Deployment's rollout and
	// intent subjects by the reply trick.
	ack := []byte(`{"stream":"FLEET_REPORTS","seq":5}`)
	rolloutSubj, _ := events.DeploymentRolloutSubject(e.ns, "api")
	intentSubj, _ := events.DeploymentIntentSubject(e.ns, "api")
	lastRollout := e.publishRaw(rolloutSubj, ack)
	lastIntent := e.publishRaw(intentSubj, ack)

	e.waitFor("every poison record counted", func() bool {
		return e.skips.Skipped(events.StreamReports, "") == uint64(len(cases)) && e.skips.Skipped(events.StreamRollout, "") == 1 &&
			e.skips.Skipped(events.StreamIntent, "") >= 1
	})
	t.Run("each variant is counted under its reason", func(t *testing.T) {
		got := map[events.SkipReason]uint64{}
		for _, r := range events.SkipReasons() {
			if n := e.skips.Skipped(events.StreamReports, r); n > 0 {
				got[r] = n
			}
		}
		if diff := cmp.Diff(wantReasons, got); diff != "" {
			t.Errorf("skipped reports by reason (-want +got):\n%s", diff)
		}
	})

	e.report("rpi-1", "api", rev, events.WorkloadConverged, "")
	e.waitFor("release to the rest", func() bool { return e.intentOf("rpi-2", "api") == 1 })
	e.report("rpi-2", "api", rev, events.WorkloadConverged, "")
	e.waitPhase("api", fleetv1.PhaseSucceeded)
	if diff := cmp.Diff(fullRollout, e.transitions("api")); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	stop()
	if seqs := e.checkpointSeqs(); seqs[0] < lastIntent || seqs[1] < lastRollout || seqs[2] < lastReport {
		t.Fatalf("checkpoint positions %v do not pass the poison (intent %d, rollout %d, reports %d)", seqs, lastIntent, lastRollout, lastReport)
	}

	t.Run("a restart from the checkpoint goes on past the poison and rolls out the next revision", func(t *testing.T) {
		e.skips = events.NewSkipCounter()
		stop = e.startOperator()
		e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
		rev2 := e.revisionOf("api", 2) // appended after the acknowledgement on the intent subject
		e.waitFor("the canary's intent of revision 2", func() bool { return e.intentOf("rpi-1", "api") == 2 })
		e.report("rpi-1", "api", rev2, events.WorkloadConverged, "")
		e.waitFor("release of revision 2", func() bool { return e.intentOf("rpi-2", "api") == 2 })
		e.report("rpi-2", "api", rev2, events.WorkloadConverged, "")
		e.waitFor("revision 2 succeeded", func() bool {
			s := e.get("api").Status
			return s.Revision != nil && s.Revision.Generation == 2 && s.Phase == fleetv1.PhaseSucceeded
		})
		if n := e.skips.Skipped(events.StreamReports, ""); n != 0 {
			t.Errorf("the restart read %d poison reports again: the checkpoint did not pass them", n)
		}
		stop()
	})

	t.Run("a rebuild from the first event reads through the poison to the same state", func(t *testing.T) {
		want := e.transitions("api")
		if err := e.obj.Delete(e.ctx, operator.CheckpointObject); err != nil {
			t.Fatal(err)
		}
		e.skips = events.NewSkipCounter()
		e.startOperator()
		e.waitFor("the poison read again", func() bool { return e.skips.Skipped(events.StreamReports, "") == uint64(len(cases)) })
		if diff := cmp.Diff(want, e.transitions("api")); diff != "" {
			t.Errorf("the rebuild appended transitions (-want +got):\n%s", diff)
		}
		// The rebuilt runner is live: it rolls out revision 3.
		e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v3" })
		rev3 := e.revisionOf("api", 3)
		e.waitFor("the canary's intent of revision 3", func() bool { return e.intentOf("rpi-1", "api") == 3 })
		e.report("rpi-1", "api", rev3, events.WorkloadConverged, "")
		e.waitFor("release of revision 3", func() bool { return e.intentOf("rpi-2", "api") == 3 })
		e.report("rpi-2", "api", rev3, events.WorkloadConverged, "")
		e.waitFor("revision 3 succeeded", func() bool {
			s := e.get("api").Status
			return s.Revision != nil && s.Revision.Generation == 3 && s.Phase == fleetv1.PhaseSucceeded
		})
	})
}

func TestAReportForgedInACanarysNameNeitherReleasesNorFailsTheRollout(t *testing.T) {
	e := newEnv(t)
	e.skips = events.NewSkipCounter()
	_, rev := e.canaryRollout("rpi-2")
	e.waitPhase("api", fleetv1.PhaseCanary)

	// Device rpi-2, with its own key, publishes on its own subject: "the
	// canary rpi-1 converged", then "the canary rpi-1 failed".
	e.publishRaw("fleet.report.rpi-2.workload", marshal(t, e.workloadEvent("rpi-1", rev, events.WorkloadConverged)))
	e.publishRaw("fleet.report.rpi-2.workload", marshal(t, e.workloadEvent("rpi-1", rev, events.WorkloadFailed)))
	e.waitFor("both forged reports refused", func() bool {
		return e.skips.Skipped(events.StreamReports, events.ReasonSubjectMismatch) == 2
	})
	if n := e.intentOf("rpi-2", "api"); n != 0 {
		t.Errorf("a forged convergence released the revision to rpi-2 (generation %d in its intent)", n)
	}
	if diff := cmp.Diff(fullRollout[:2], e.transitions("api")); diff != "" {
		t.Errorf("transitions after the forged reports (-want +got):\n%s", diff)
	}
	d := e.get("api")
	if d.Status.Phase != fleetv1.PhaseCanary || d.Status.Counts.CanariesSucceeded != 0 || d.Status.Counts.Failed != 0 || d.Status.LatestFailure != nil {
		t.Errorf("status counts a forged report: %+v", d.Status)
	}

	// The canary's own report still counts.
	e.report("rpi-1", "api", rev, events.WorkloadConverged, "")
	e.waitFor("release to the rest", func() bool { return e.intentOf("rpi-2", "api") == 1 })
}

// garbage returns n report payloads for the devices' workload subjects:
// random bytes, valid reports of another revision with bytes flipped,
// truncated reports, reports in another device's name, and the poison
// variants.
func garbage(t *testing.T, e *env, rev events.DeploymentRevisionCreated, devices []string, n int) (subjects []string, payloads [][]byte) {
	t.Helper()
	rng := rand.New(rand.NewPCG(7, 11))
	var poison []poisontest.Case
	for _, d := range devices {
		poison = append(poison, poisontest.For(t, e.workloadEvent(d, rev, events.WorkloadFailed))...)
	}
	other := rev
	other.UID, other.RevisionID = "garbage-uid", "garbage"
	for i := range n {
		dev := devices[rng.IntN(len(devices))]
		var p []byte
		switch i % 5 {
		case 0:
			p = make([]byte, rng.IntN(2048))
			for j := range p {
				p[j] = byte(rng.UintN(256))
			}
		case 1:
			p = marshal(t, e.workloadEvent(dev, other, events.WorkloadFailed))
			for range 1 + rng.IntN(4) {
				p[rng.IntN(len(p))] ^= byte(1 << rng.UintN(8))
			}
		case 2:
			full := marshal(t, e.workloadEvent(dev, rev, events.WorkloadFailed))
			p = full[:rng.IntN(len(full))]
		case 3:
			p = marshal(t, e.workloadEvent(devices[(slicesIndex(devices, dev)+1)%len(devices)], rev, events.WorkloadFailed))
		case 4:
			p = poison[rng.IntN(len(poison))].Payload
		}
		subjects = append(subjects, "fleet.report."+dev+".workload")
		payloads = append(payloads, p)
	}
	return subjects, payloads
}

func slicesIndex(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// undecodable is how many of the payloads the runner skips: refused by
// DecodeStored, or an envelope whose workload data does not decode.
func undecodable(subjects []string, payloads [][]byte) uint64 {
	var n uint64
	for i, p := range payloads {
		ev, err := events.DecodeStored(subjects[i], p)
		if err == nil {
			_, err = events.Decode[events.WorkloadStatus](ev)
		}
		if err != nil {
			n++
		}
	}
	return n
}

func TestHundredsOfGarbageReportsDuringARolloutNeverStopTheRunner(t *testing.T) {
	e := newEnv(t)
	e.logs = slog.DiscardHandler // a warning per garbage record
	e.skips = events.NewSkipCounter()
	devices := []string{"rpi-1", "rpi-2", "rpi-3"}
	stop, rev := e.canaryRollout("rpi-2", "rpi-3")
	subjects, payloads := garbage(t, e, rev, devices, 400)
	want := undecodable(subjects, payloads)
	if want < 300 {
		t.Fatalf("only %d of %d payloads are undecodable: the garbage is too tame", want, len(payloads))
	}

	// The garbage arrives while the rollout runs, published as devices
	// publish reports (core publishes: nothing acknowledges them). The
	// garbage and the real reports share subjects, so neither waits for
	// its last record to be stored (garbage after it would hide it): the
	// real reports are confirmed by what they cause (release, success),
	// the garbage by the runner counting every undecodable payload below.
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		msgs := make([]*nats.Msg, len(payloads))
		for i, p := range payloads {
			msgs[i] = &nats.Msg{Subject: subjects[i], Data: p}
		}
		if err := e.publishReports(msgs...); err != nil {
			errs <- fmt.Errorf("publish garbage: %w", err)
		}
	}()
	e.waitFor("the canary's intent", func() bool { return e.intentOf("rpi-1", "api") == 1 })
	e.reportUnconfirmed("rpi-1", "api", rev, events.WorkloadConverged, "")
	e.waitFor("release to the rest", func() bool { return e.intentOf("rpi-2", "api") == 1 && e.intentOf("rpi-3", "api") == 1 })
	e.reportUnconfirmed("rpi-2", "api", rev, events.WorkloadConverged, "")
	e.reportUnconfirmed("rpi-3", "api", rev, events.WorkloadConverged, "")
	e.waitPhase("api", fleetv1.PhaseSucceeded)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	// Nothing acknowledges a report: every garbage report and the three
	// real ones reached the stream (the test's own server; nothing else
	// reports on it).
	e.waitFor(fmt.Sprintf("the %d garbage and 3 real reports stored", len(payloads)), func() bool {
		s, err := e.store.JetStream().Stream(e.ctx, events.StreamReports)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs == uint64(len(payloads))+3
	})
	e.waitFor(fmt.Sprintf("%d undecodable reports counted", want), func() bool { return e.skips.Skipped(events.StreamReports, "") == want })
	if diff := cmp.Diff(fullRollout, e.transitions("api")); diff != "" {
		t.Errorf("transitions (-want +got):\n%s", diff)
	}
	stop() // Run returned no error: stop checks it

	t.Run("a rebuild from the first event reads through the garbage to the same state", func(t *testing.T) {
		if err := e.obj.Delete(e.ctx, operator.CheckpointObject); err != nil {
			t.Fatal(err)
		}
		e.skips = events.NewSkipCounter()
		e.startOperator()
		e.waitFor("the garbage read again", func() bool { return e.skips.Skipped(events.StreamReports, "") == want })
		if diff := cmp.Diff(fullRollout, e.transitions("api")); diff != "" {
			t.Errorf("transitions after the rebuild (-want +got):\n%s", diff)
		}
		// The rebuilt runner is live: a spec change without canaries'
		// reports stays at its canary stage, with the revision's status.
		e.update("api", func(d *fleetv1.Deployment) { d.Spec.Score.Data.Services[0].Image = "registry.example.com/api:v2" })
		e.revisionOf("api", 2)
		e.waitFor("the canary's intent of revision 2", func() bool { return e.intentOf("rpi-1", "api") == 2 })
		e.waitFor("status of revision 2", func() bool {
			s := e.get("api").Status
			return s.Revision != nil && s.Revision.Generation == 2 && s.Phase == fleetv1.PhaseCanary
		})
	})
}

func TestTheOperatorRegistersTheSkippedRecordsCounter(t *testing.T) {
	e := newEnv(t)
	e.startOperator()
	e.waitFor("the counter in controller-runtime's metrics registry", func() bool {
		probe := events.NewSkipCounter().Collector()
		err := metrics.Registry.Register(probe)
		if err == nil {
			metrics.Registry.Unregister(probe) // not there yet: leave the name free
			return false
		}
		var are prometheus.AlreadyRegisteredError
		return errors.As(err, &are)
	})
}

func TestTelemetryReportsThatDoNotDecodeAreSkippedAndCounted(t *testing.T) {
	e := newDevEnv(t)
	e.skips = events.NewSkipCounter()
	id, other, barrier := e.id("rpi-1"), e.id("rpi-2"), e.id("rpi-3")
	e.create(id, nil)
	e.create(other, nil)
	e.create(barrier, nil)
	e.start(time.Minute)
	e.waitDevice(id, "Unknown liveness", func(d *fleetv1.Device) bool { return d.Status.Liveness == fleetv1.LivenessUnknown })

	// As a device publishes (never acknowledged), waited for until stored.
	publish := func(subject string, payload []byte) {
		t.Helper()
		natstest.PublishStored(t, e.store.JetStream().Conn(), &nats.Msg{Subject: subject, Data: payload})
	}
	event := func(device string, d events.Data) events.Event {
		t.Helper()
		ev, err := events.New(events.Keys{Device: device}, d)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	for _, tc := range poisontest.For(t, event(id, events.DeviceHeartbeat{AgentVersion: "1"})) {
		publish("fleet.report."+id+".heartbeat", tc.Payload)
	}
	for _, tc := range poisontest.For(t, event(id, events.DeviceInventory{OS: "linux", Labels: map[string]string{"zone": "poison"}})) {
		publish("fleet.report."+id+".inventory", tc.Payload)
	}
	for _, tc := range poisontest.For(t, event(id, events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: e.ns, Deployment: "api",
		Containers: []events.ContainerState{{Name: "api", State: "running"}}}}})) {
		publish("fleet.report."+id+".containers", tc.Payload)
	}
	// Heartbeats are read from FLEET_LIVENESS, inventories from
	// FLEET_TELEMETRY (ADR 0024).
	mismatchedIn := func() uint64 {
		return e.skips.Skipped(events.StreamTelemetry, events.ReasonSubjectMismatch) + e.skips.Skipped(events.StreamLiveness, events.ReasonSubjectMismatch)
	}
	mismatched := mismatchedIn()
	// rpi-1, on its own subjects, speaks for rpi-2.
	publish("fleet.report."+id+".heartbeat", marshal(t, event(other, events.DeviceHeartbeat{AgentVersion: "1"})))
	publish("fleet.report."+id+".inventory", marshal(t, event(other, events.DeviceInventory{OS: "linux", Labels: map[string]string{"zone": "forged"}})))
	// Telemetry keeps only the last few records per subject, so how many of
	// the poison records the reader sees depends on how far behind it is;
	// the two forged records are the last on their subjects and are always
	// read. A heartbeat and an inventory of a third device after them are
	// the barrier: each reader reads its stream in order.
	e.heartbeat(barrier)
	e.report(barrier, events.DeviceInventory{OS: "barrier"})
	e.waitDevice(barrier, "Online with its inventory (the readers passed the forged records)", func(d *fleetv1.Device) bool {
		return d.Status.Liveness == fleetv1.LivenessOnline && d.Status.Inventory != nil && d.Status.Inventory.OS == "barrier"
	})
	if got := mismatchedIn(); got < mismatched+2 {
		t.Errorf("%d records refused for naming another device, want at least %d (the two forged ones)", got, mismatched+2)
	}

	o := e.get(other)
	if o.Status.Liveness == fleetv1.LivenessOnline || o.Labels["zone"] != "" || o.Status.Inventory != nil {
		t.Errorf("reports on %s's subjects changed %s: liveness %s, labels %v, inventory %+v", id, other, o.Status.Liveness, o.Labels, o.Status.Inventory)
	}
	// The device's own valid reports still count.
	e.report(id, events.DeviceInventory{OS: "debian-12", Arch: "arm64", Kernel: "6.1.0", AgentVersion: "1.0.0", Labels: map[string]string{"zone": "a"}})
	e.heartbeat(id)
	d := e.waitDevice(id, "Online with the inventory", func(d *fleetv1.Device) bool {
		return d.Status.Liveness == fleetv1.LivenessOnline && d.Status.Inventory != nil && d.Labels["zone"] == "a"
	})
	if d.Labels["zone"] != "a" {
		t.Errorf("labels %v", d.Labels)
	}
}

// TestReportsOfMadeUpDeploymentsAndRevisionsCannotGrowTheRunner: a device
// that reports, on its own subject, well-formed statuses of thousands of
// Deployments and revisions that do not exist leaves the runner's state
// (its checkpoint shows it) bounded, and the real rollout completes.
func TestReportsOfMadeUpDeploymentsAndRevisionsCannotGrowTheRunner(t *testing.T) {
	e := newEnv(t)
	e.skips = events.NewSkipCounter()
	// A canary, as in the other tests of the package: the operators of
	// later tests see this namespace's Deployment too (one API server), and
	// a canary that never reports to them keeps them from releasing it.
	stop, rev := e.canaryRollout("rpi-2")
	e.waitFor("the canary's intent", func() bool { return e.intentOf("rpi-1", "api") == 1 })

	const madeUp = 4500
	// A flood: core publishes in order on one connection, confirmed by the
	// last one stored.
	flood := make([]*nats.Msg, 0, madeUp)
	for i := range madeUp {
		made := rev
		made.UID, made.Generation = fmt.Sprintf("made-up-%d", i), int64(2+i%40)
		ev := e.workloadEvent("rpi-2", made, events.WorkloadConverged)
		d, err := events.Decode[events.WorkloadStatus](ev)
		if err != nil {
			t.Fatal(err)
		}
		switch i % 3 {
		case 0:
			d.Deployment = fmt.Sprintf("ghost-%d", i) // a Deployment that does not exist
		case 1:
			d.Deployment = "ghost" // one that does not exist, with ever new revisions
		}
		ev, err = events.New(ev.Keys, d, events.WithCorrelation(made.UID, made.Generation))
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, &nats.Msg{Subject: "fleet.report.rpi-2.workload", Data: marshal(t, ev)})
	}
	natstest.PublishStored(t, e.store.JetStream().Conn(), flood...)
	e.report("rpi-1", "api", rev, events.WorkloadConverged, "")
	e.report("rpi-2", "api", rev, events.WorkloadConverged, "")
	e.waitPhase("api", fleetv1.PhaseSucceeded)
	stop() // writes the checkpoint

	b, err := e.obj.GetBytes(e.ctx, operator.CheckpointObject)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Rollouts map[string]struct {
			Early []json.RawMessage `json:"early"`
		} `json:"rollouts"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	// Other tests of this package share the server: count this namespace's.
	n := 0
	for k := range c.Rollouts {
		if strings.HasPrefix(k, e.ns+"/") {
			n++
		}
	}
	if n > 1+1024 {
		t.Errorf("the runner keeps %d Deployments of this namespace after %d reports of made-up ones, want at most 1 + 1024", n, madeUp/3)
	}
	for _, name := range []string{"api", "ghost"} {
		if n := len(c.Rollouts[e.ns+"/"+name].Early); n > 8 {
			t.Errorf("the runner keeps reports of %d made-up revisions of %s, want at most 8", n, name)
		}
	}
}

// TestAForgedDegradedIsRefused: a device cannot make another device, or a
// revision it does not hold, degraded. A report in another device's name
// is skipped (subject-mismatch); one from a device that holds no revision
// of the Deployment, or another revision than it holds, is dropped and
// counted. The devices' own reports still count.
func TestAForgedDegradedIsRefused(t *testing.T) {
	e := newEnv(t)
	e.skips = events.NewSkipCounter()
	e.metrics = operator.NewMetrics()
	e.device("rpi-3", map[string]string{"role": "elsewhere"})
	_, rev := e.succeededRollout("rpi-2")
	dropped := func() float64 {
		v, _ := scrape(t, e.metrics, operator.MetricRunnerReports, map[string]string{"outcome": "dropped"})
		return v
	}
	before := dropped()

	// rpi-2, on its own subject, in rpi-1's name.
	e.publishRaw("fleet.report.rpi-2.health", marshal(t, e.healthEvent("rpi-1", "api", rev, events.TypeWorkloadDegraded, events.HealthCrashLoop, 3)))
	// rpi-3, which runs no revision of api, in its own name.
	e.publishRaw("fleet.report.rpi-3.health", marshal(t, e.healthEvent("rpi-3", "api", rev, events.TypeWorkloadDegraded, events.HealthCrashLoop, 3)))
	// rpi-2, about a revision it was never handed.
	other := rev
	other.Generation, other.RevisionID = 7, "7-forged"
	e.publishRaw("fleet.report.rpi-2.health", marshal(t, e.healthEvent("rpi-2", "api", other, events.TypeWorkloadDegraded, events.HealthOOMKilled, 1)))
	e.waitFor("the report in another's name skipped, the others dropped", func() bool {
		return e.skips.Skipped(events.StreamReports, events.ReasonSubjectMismatch) == 1 && dropped()-before == 2
	})
	if c := e.degraded("api"); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Degraded %+v after forged reports only, want False", c)
	}

	// rpi-2's own report of the revision it runs counts.
	if err := e.store.Report(e.ctx, e.healthEvent("rpi-2", "api", rev, events.TypeWorkloadDegraded, events.HealthCrashLoop, 3)); err != nil {
		t.Fatal(err)
	}
	e.waitFor("Degraded True", func() bool { c := e.degraded("api"); return c != nil && c.Status == metav1.ConditionTrue })
	if got := e.get("api").Status.Degraded; len(got) != 1 || got[0].Device != "rpi-2" || got[0].Revision != rev.RevisionID {
		t.Errorf("degraded %+v, want rpi-2 on %s only", got, rev.RevisionID)
	}
}

// TestADegradedFloodIsBounded: 100,000 alternating degraded and recovered
// reports from one device cost one entry, at most one status write per
// StatusInterval, and leave the device's workload history as it was.
func TestADegradedFloodIsBounded(t *testing.T) {
	e := newEnv(t)
	e.metrics = operator.NewMetrics()
	e.logs = slog.DiscardHandler
	_, rev := e.succeededRollout("rpi-2")
	writes := func() float64 {
		v, _ := scrape(t, e.metrics, operator.MetricRunnerStatusWrites, map[string]string{"result": "ok"})
		return v
	}
	workload := func() []events.Record {
		var out []events.Record
		for r, err := range e.store.Replay(e.ctx, "fleet.report.rpi-2.workload", events.FromStart()) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, r)
		}
		return out
	}
	history := workload()

	const flood = 100_000
	msgs := make([]*nats.Msg, 0, flood)
	for i := range flood {
		typ, reason := events.TypeWorkloadDegraded, events.HealthCrashLoop
		switch {
		case i == flood-1:
			reason = events.HealthOOMKilled // the last word, to wait for
		case i%2 == 1:
			typ, reason = events.TypeWorkloadRecovered, events.HealthStable
		}
		m, err := events.Message(e.healthEvent("rpi-2", "api", rev, typ, reason, i))
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, m)
	}
	start, before := time.Now(), writes()
	natstest.PublishStored(t, e.store.JetStream().Conn(), msgs...)
	e.waitFor("the flood's last report folded", func() bool {
		got := e.get("api").Status.Degraded
		return len(got) == 1 && got[0].Reason == events.HealthOOMKilled
	})
	elapsed := time.Since(start)
	if n, most := writes()-before, float64(elapsed/(100*time.Millisecond))+3; n > most {
		t.Errorf("%v status writes in %s for %d reports, want at most one per StatusInterval (100ms): %v", n, elapsed, flood, most)
	}
	if d := e.get("api").Status; d.Counts.Degraded != 1 || d.Phase != fleetv1.PhaseSucceeded {
		t.Errorf("counts.degraded %d, phase %s; want 1 entry and Succeeded", d.Counts.Degraded, d.Phase)
	}
	after := workload()
	if len(after) != len(history) || len(after) == 0 || after[len(after)-1].Sequence != history[len(history)-1].Sequence {
		t.Errorf("the device's workload history changed under the flood: %d records, then %d", len(history), len(after))
	}
}

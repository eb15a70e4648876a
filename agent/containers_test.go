package agent_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// snapshots returns every device.containers report the device sent that
// the telemetry stream keeps (the last few).
func (e *watchEnv) snapshot() (events.DeviceContainers, uint64) {
	e.t.Helper()
	rec, err := e.st.Last(e.ctx, "fleet.report.d1.containers")
	if err != nil {
		return events.DeviceContainers{}, 0
	}
	dc, err := events.Decode[events.DeviceContainers](rec.Event)
	if err != nil {
		e.t.Fatal(err)
	}
	return dc, rec.Sequence
}

func TestTheContainersAreReportedOnChangeAtMostOnceAMinuteAndAfterAHealthTransition(t *testing.T) {
	e := startWatched(t, nil, t.TempDir())
	testenv.Eventually(t, "a snapshot at start", 20*time.Second, func() bool { _, seq := e.snapshot(); return seq > 0 })
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	e.advance(time.Minute)
	var dc events.DeviceContainers
	testenv.Eventually(t, "a snapshot with the Deployment", 20*time.Second, func() bool {
		dc, _ = e.snapshot()
		return len(dc.Workloads) == 1
	})
	w := dc.Workloads[0]
	var names []string
	for _, c := range w.Containers {
		names = append(names, c.Role+":"+c.Name+":"+c.State)
	}
	if w.Namespace != "lab" || w.Deployment != "analysis" || w.UID != "u1" || w.Generation != 1 || w.RevisionID != "r" || w.Degraded != "" ||
		!slices.Equal(names, []string{"init:migrate:exited", "service:api:running", "service:worker:running"}) {
		t.Fatalf("workload %+v, containers %v", w, names)
	}
	if api := w.Containers[1]; api.ImageDigest != sim.ImageDigest("reg.example/api:v1") || api.StartedAt == nil || api.Restarts != 0 {
		t.Errorf("api %+v", api)
	}

	_, before := e.snapshot()
	e.crash("api", 2, false)
	e.advance(30 * time.Second)
	if _, seq := e.snapshot(); seq != before {
		t.Fatal("a second snapshot within a minute")
	}
	e.crash("api", 2, false)
	e.crash("api", 2, false) // Degraded: a snapshot at once
	e.waitHealth("degraded gen 1 CrashLoop")
	testenv.Eventually(t, "a snapshot right after the transition", 20*time.Second, func() bool {
		dc, _ = e.snapshot()
		return len(dc.Workloads) == 1 && dc.Workloads[0].Degraded == events.HealthCrashLoop
	})
	if api := dc.Workloads[0].Containers[1]; api.Restarts != 3 || api.ExitCode != 2 || api.ExitedAt == nil {
		t.Errorf("api after 3 crashes %+v", api)
	}
}

func TestContainerReportsCanBeTurnedOff(t *testing.T) {
	e := startWatched(t, nil, t.TempDir(), func(o *agent.Options) { o.NoContainerReports = true })
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	e.advance(2 * time.Minute)
	if _, seq := e.snapshot(); seq != 0 {
		t.Error("a container snapshot was sent with --report-containers=false")
	}
}

func TestADegradedReportIsSentAgainByteForByteAfterAReconnect(t *testing.T) {
	e := startWatched(t, nil, t.TempDir())
	admin := natstest.Connect(t, e.srv)
	sub, err := admin.SubscribeSync("fleet.report.d1.health")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.Flush(); err != nil {
		t.Fatal(err)
	}
	e.put(entry(t, 1, baseScore()))
	e.waitStatus(1, events.WorkloadConverged)
	for range 3 {
		e.crash("api", 2, false)
	}
	first, err := sub.NextMsg(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	var again *nats.Msg
	for again == nil {
		m, err := sub.NextMsg(20 * time.Second)
		if err != nil {
			t.Fatalf("the Degraded report was not sent again after the reconnect: %v", err)
		}
		if m.Header.Get("Nats-Msg-Id") == first.Header.Get("Nats-Msg-Id") {
			again = m
		}
	}
	if !bytes.Equal(again.Data, first.Data) {
		t.Errorf("sent again as\n%s\nnot byte for byte as\n%s", again.Data, first.Data)
	}
	if n := len(e.health()); n != 1 {
		t.Errorf("%d health records stored, want the one", n)
	}
}

package operator_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/score"
)

// crashLooping is a containers report of Deployment lab/api, Degraded: its
// init container ran, its service restarted 3 times and last exited with
// code 2.
func crashLooping(ns, uid string, restarts int) events.DeviceContainers {
	exited := time.Date(2026, 12, 5, 3, 4, 5, 0, time.UTC)
	return events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: ns, Deployment: "api", UID: uid, Generation: 2,
		RevisionID: "rev-2", Degraded: events.HealthCrashLoop, Containers: []events.ContainerState{
			{Name: "migrate", Role: events.ContainerRoleInit, State: "exited", ExitedAt: &exited},
			{Name: "api", Role: events.ContainerRoleService, State: "running", Restarts: restarts, ExitCode: 2, ExitedAt: &exited,
				Health: "starting", ImageDigest: "sha256:" + strings.Repeat("ab", 32)},
		}}}}
}

// restartsOf is the restart count of container name of Deployment dep on
// the Device's status; -1 when it is not there.
func restartsOf(d *fleetv1.Device, dep, name string) int32 {
	for _, w := range d.Status.Workloads {
		if w.Deployment != dep {
			continue
		}
		for _, c := range w.Containers {
			if c.Name == name {
				return c.Restarts
			}
		}
	}
	return -1
}

func TestContainersReachTheDeviceStatus(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-1")
	e.create(id, nil)
	e.start(time.Minute)
	e.report(id, crashLooping(e.ns, "uid-1", 3))
	d := e.waitDevice(id, "the workloads", func(d *fleetv1.Device) bool { return len(d.Status.Workloads) > 0 })

	exited := metav1.NewTime(time.Date(2026, 12, 5, 3, 4, 5, 0, time.UTC))
	want := []fleetv1.DeviceWorkload{{Namespace: e.ns, Deployment: "api", Revision: "rev-2", Degraded: "CrashLoop", Containers: []fleetv1.DeviceContainer{
		{Name: "migrate", Role: "init", State: "exited", LastExit: &fleetv1.ContainerExit{At: &exited}},
		{Name: "api", Role: "service", State: "running", Restarts: 3, LastExit: &fleetv1.ContainerExit{Code: 2, At: &exited}, Health: "starting",
			ImageDigest: "sha256:" + strings.Repeat("ab", 32)},
	}}}
	if diff := cmp.Diff(want, d.Status.Workloads, cmp.Comparer(func(a, b metav1.Time) bool { return a.Equal(&b) })); diff != "" {
		t.Errorf("status.workloads (-want +got):\n%s", diff)
	}
	if d.Status.DegradedWorkloads != 1 || d.Status.WorkloadsTruncated {
		t.Errorf("degradedWorkloads %d, workloadsTruncated %v; want 1, false", d.Status.DegradedWorkloads, d.Status.WorkloadsTruncated)
	}

	t.Run("kubectl get fdev shows the degraded Deployments", func(t *testing.T) {
		out, err := e.srv.Kubectl(e.ctx, nil, "get", "fdev", id, "-n", e.ns)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) != 2 {
			t.Fatalf("kubectl get fdev:\n%s", out)
		}
		i := strings.Index(lines[0], "DEGRADED")
		if i < 0 || len(lines[1]) <= i || strings.Fields(lines[1][i:])[0] != "1" {
			t.Errorf("kubectl get fdev, want a DEGRADED column of 1:\n%s", out)
		}
	})
	t.Run("kubectl describe fdev shows each container", func(t *testing.T) {
		out, err := e.srv.Kubectl(e.ctx, nil, "describe", "fdev", id, "-n", e.ns)
		if err != nil {
			t.Fatal(err)
		}
		flat := strings.Join(strings.Fields(string(out)), " ")
		for _, s := range []string{"Degraded Workloads: 1", "Workloads: Containers:", "Name: migrate Restarts: 0 Role: init State: exited",
			"Image Digest: sha256:abab", "Code: 2 Name: api Restarts: 3 Role: service State: running", "Degraded: CrashLoop Deployment: api"} {
			if !strings.Contains(flat, s) {
				t.Errorf("kubectl describe fdev lacks %q:\n%s", s, out)
			}
		}
	})
	t.Run("a Device without container reports has no workloads", func(t *testing.T) {
		quiet := e.id("rpi-quiet")
		e.create(quiet, nil)
		e.heartbeat(quiet)
		d := e.waitDevice(quiet, "Online", func(d *fleetv1.Device) bool { return d.Status.Liveness == fleetv1.LivenessOnline })
		if d.Status.Workloads != nil || d.Status.DegradedWorkloads != 0 || d.Status.WorkloadsTruncated {
			t.Errorf("status %+v, want no workloads fields", d.Status)
		}
	})
	t.Run("an operator that starts later reads the last report", func(t *testing.T) {
		late := e.id("rpi-late")
		e.create(late, nil)
		e.report(late, crashLooping(e.ns, "uid-1", 1))
		e.report(late, crashLooping(e.ns, "uid-1", 7))
		e.start(time.Minute)
		e.waitDevice(late, "the last report's restarts", func(d *fleetv1.Device) bool { return restartsOf(d, "api", "api") == 7 })
	})
}

func TestAHostileContainersReportIsBoundedAndEscapedOnItsDevice(t *testing.T) {
	e := newDevEnv(t)
	id := e.id("rpi-hostile")
	e.create(id, nil)
	e.start(time.Minute)
	// 1,000 Deployments in the 64 KiB a report may take (the fields an
	// agent would send empty left out), the first with 20 containers of
	// long names of control characters.
	type workload struct {
		Deployment string                  `json:"deployment"`
		Degraded   string                  `json:"degraded"`
		Containers []events.ContainerState `json:"containers,omitempty"`
	}
	var ws []workload
	for i := range 1000 {
		ws = append(ws, workload{Deployment: fmt.Sprintf("d%04d\u202e", i), Degraded: "x\x1b"})
	}
	long := strings.Repeat("\x01", 24)
	for j := range 20 {
		ws[0].Containers = append(ws[0].Containers, events.ContainerState{Name: fmt.Sprintf("c%02d\u2066%s", j, long), Role: long,
			State: "running\x00", Restarts: -5, ExitCode: 1 << 40, Signal: long, ImageDigest: long})
	}
	data, err := json.Marshal(map[string]any{"workloads": ws})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := events.New(events.Keys{Device: id}, events.DeviceContainers{})
	if err != nil {
		t.Fatal(err)
	}
	ev.Data = data
	subject, err := events.ReportSubject(id, events.ReportContainers)
	if err != nil {
		t.Fatal(err)
	}
	raw := marshal(t, ev)
	if len(raw) > events.MaxReportSize {
		t.Fatalf("the hostile report is %d bytes, over the %d a report may take", len(raw), events.MaxReportSize)
	}
	natstest.PublishStored(t, e.store.JetStream().Conn(), &nats.Msg{Subject: subject, Data: raw})
	d := e.waitDevice(id, "the bounded workloads", func(d *fleetv1.Device) bool { return len(d.Status.Workloads) > 0 })

	if n := len(d.Status.Workloads); n > operator.MaxDeviceWorkloads || !d.Status.WorkloadsTruncated {
		t.Errorf("%d workloads, truncated %v; want at most %d, truncated", n, d.Status.WorkloadsTruncated, operator.MaxDeviceWorkloads)
	}
	if d.Status.DegradedWorkloads != int32(events.MaxContainerWorkloads) {
		t.Errorf("degradedWorkloads %d, want %d (the Deployments of the report's bound)", d.Status.DegradedWorkloads, events.MaxContainerWorkloads)
	}
	w := d.Status.Workloads[0]
	if w.Deployment != `d0000\u202e` || w.Degraded != `x\u001b` {
		t.Errorf("workload %q degraded %q: want the first name and the reason escaped", w.Deployment, w.Degraded)
	}
	if len(w.Containers) != operator.MaxDeviceWorkloadContainers {
		t.Errorf("%d containers, want %d", len(w.Containers), operator.MaxDeviceWorkloadContainers)
	}
	ct := w.Containers[0]
	if !strings.HasPrefix(ct.Name, `c00\u2066\u0001`) || len(ct.Name) > 63 || ct.State != `running\u0000` || ct.Restarts != 0 ||
		ct.LastExit == nil || ct.LastExit.Code != 1<<31-1 || len(ct.ImageDigest) > 128 || len(ct.Role) > 16 || len(ct.LastExit.Signal) > 16 {
		t.Errorf("container %+v (last exit %+v): want escaped, cut and clamped fields", ct, ct.LastExit)
	}
	out, err := e.srv.Kubectl(e.ctx, nil, "describe", "fdev", id, "-n", e.ns)
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsFunc(string(out), func(r rune) bool { return r != '\n' && events.Invisible(r) }) {
		t.Errorf("kubectl describe fdev prints a hidden character:\n%q", out)
	}

	t.Run("the API server refuses workloads over the bounds whoever writes them", func(t *testing.T) {
		d := e.get(id)
		d.Status.Workloads = append(d.Status.Workloads, make([]fleetv1.DeviceWorkload, operator.MaxDeviceWorkloads)...)
		if err := e.c.Status().Update(e.ctx, d); err == nil || !strings.Contains(err.Error(), "status.workloads") {
			t.Errorf("%d workloads: %v, want a refusal naming status.workloads", len(d.Status.Workloads), err)
		}
		d = e.get(id)
		d.Status.Workloads[0].Containers[0].Name = strings.Repeat("n", 64)
		if err := e.c.Status().Update(e.ctx, d); err == nil || !strings.Contains(err.Error(), "name") {
			t.Errorf("a 64-byte container name: %v, want a refusal", err)
		}
	})
}

// fakeClock is a clock the test moves; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.ns.Store(t.UnixNano())
	return c
}

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// startAt runs an operator whose Device controller decides by clock.
func (e *devEnv) startAt(clock *fakeClock, staleAfter time.Duration) {
	e.now = clock.now
	e.start(staleAfter)
}

func TestAContainersFloodWritesTheDeviceAtMostOncePerMinute(t *testing.T) {
	e := newDevEnv(t)
	e.metrics = operator.NewMetrics()
	id := e.id("rpi-flood")
	e.create(id, nil)
	uid := e.deployment("api")
	clock := newFakeClock(time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC))
	e.startAt(clock, time.Minute)
	e.report(id, crashLooping(e.ns, uid, 0))
	d := e.waitDevice(id, "the first report", func(d *fleetv1.Device) bool { return restartsOf(d, "api", "api") == 0 })

	w, err := e.c.Watch(e.ctx, &fleetv1.DeviceList{}, client.InNamespace(e.ns),
		&client.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", id), Raw: &metav1.ListOptions{ResourceVersion: d.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	// A report a second, by the controller's clock, for two and a half
	// minutes: the restart count grows at each. Each is sent once the
	// controller has read the one before (it counted its restart), so a
	// controller that wrote each would be seen.
	const reports = 150
	for i := 1; i <= reports; i++ {
		clock.advance(time.Second)
		e.report(id, crashLooping(e.ns, uid, i))
		testenv.Eventually(t, fmt.Sprintf("report %d read", i), 60*time.Second, func() bool { return e.restarts("api") == float64(i) })
	}
	// One more report, read before the controller's clock moves on: a
	// reconcile still pending for an earlier report then finds the last
	// one too. A minute later by the controller's clock it is due, and
	// written by the next reconcile (the wait the controller asked for
	// runs in real time, up to a minute). The clock is advanced again, a
	// bounded number of times, while the write is awaited: a reconcile
	// that read the clock before it moved asks for its own wait again.
	e.report(id, crashLooping(e.ns, uid, reports+1))
	testenv.Eventually(t, fmt.Sprintf("report %d read", reports+1), 60*time.Second, func() bool { return e.restarts("api") == float64(reports+1) })
	var written []int32
	drain := func() error {
		for {
			select {
			case ev := <-w.ResultChan():
				if ev.Type != watch.Modified {
					return fmt.Errorf("watch event %s: %+v", ev.Type, ev.Object)
				}
				written = append(written, restartsOf(ev.Object.(*fleetv1.Device), "api", "api"))
			default:
				if len(written) > 0 && written[len(written)-1] == reports+1 {
					return nil
				}
				return fmt.Errorf("writes so far show restarts %v, want the last %d", written, reports+1)
			}
		}
	}
	const advances = 4
	for i := 1; ; i++ {
		clock.advance(time.Minute)
		err = testenv.PollErr(e.ctx, 45*time.Second, drain)
		if err == nil || i == advances {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	// 211 seconds of the controller's clock after the first write (the
	// minutes advanced after the last report, whose write ends the test,
	// aside): at most one write a minute, so at most 3 more (the restart
	// counts written show where the controller had read to).
	if len(written) > 3 {
		t.Errorf("%d writes of the Device (restarts %v) for %d reports in %s, want at most 3", len(written), written, reports+1, reports*time.Second+time.Minute)
	}
	t.Logf("writes of the Device show restarts %v", written)
}

// deployment creates Deployment name, which targets no device, and returns
// its UID. Call it before the operators start: the test's objects are
// removed after they stopped, or the next test's operators would append
// the Deployment's revisions to their stores.
func (e *devEnv) deployment(name string) string {
	e.t.Helper()
	e.t.Cleanup(func() { removeAll(e.t, e.c, e.ns) })
	dep := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, Spec: fleetv1.DeploymentSpec{
		TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "none"}},
		Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
			Name: "api", Image: "registry.example.com/api:v1"}}}}}}
	if err := e.c.Create(e.ctx, dep); err != nil {
		e.t.Fatal(err)
	}
	return string(dep.UID)
}

// restarts is fleet_deployment_container_restarts_total of Deployment
// name.
func (e *devEnv) restarts(name string) float64 {
	e.t.Helper()
	v, _ := scrape(e.t, e.metrics, operator.MetricContainerRestarts, map[string]string{"namespace": e.ns, "deployment": name})
	return v
}

func TestContainerRestartsAreCountedByDeploymentWithoutADeviceLabel(t *testing.T) {
	e := newDevEnv(t)
	e.metrics = operator.NewMetrics()
	id := e.id("rpi-1")
	e.create(id, nil)
	uid := e.deployment("api")
	stop := e.start(time.Minute)
	restarts := func() float64 { return e.restarts("api") }
	// report is a report of api and of Deployments the device cannot count
	// for: one that does not exist, one of another UID (a deleted and
	// recreated namesake), and one of another namespace.
	report := func(n int) {
		c := crashLooping(e.ns, uid, n)
		for _, o := range []struct{ ns, name, uid string }{{e.ns, "ghost", uid}, {e.ns, "api-old", "other-uid"}, {"kube-system", "api", uid}} {
			w := crashLooping(o.ns, o.uid, n).Workloads[0]
			w.Deployment = o.name
			c.Workloads = append(c.Workloads, w)
		}
		e.report(id, c)
	}
	report(2)
	e.waitDevice(id, "the first report, the baseline", func(d *fleetv1.Device) bool { return restartsOf(d, "api", "api") == 2 })
	if v := restarts(); v != 0 {
		t.Errorf("%s = %v after the first report, want 0 (the baseline)", operator.MetricContainerRestarts, v)
	}
	report(5)
	testenv.Eventually(t, "3 restarts counted", 60*time.Second, func() bool { return restarts() == 3 })

	// The service is replaced (a new revision, or the engine's count was
	// reset): its new count is counted whole.
	c := crashLooping(e.ns, uid, 1)
	c.Workloads[0].RevisionID = "rev-3"
	e.report(id, c)
	testenv.Eventually(t, "the replaced container's restart counted", 60*time.Second, func() bool { return restarts() == 4 })

	fam := family(t, e.metrics, operator.MetricContainerRestarts)
	if fam == nil {
		t.Fatalf("no %s", operator.MetricContainerRestarts)
	}
	if n := len(fam.GetMetric()); n != 1 {
		t.Errorf("%d series of %s, want 1 (api): a device cannot make up Deployments or count for another namespace", n, operator.MetricContainerRestarts)
	}
	for _, s := range fam.GetMetric() {
		var names []string
		for _, l := range s.GetLabel() {
			names = append(names, l.GetName())
			if strings.Contains(l.GetValue(), id) {
				t.Errorf("label %s=%q names the device", l.GetName(), l.GetValue())
			}
		}
		if diff := cmp.Diff([]string{"deployment", "namespace"}, names); diff != "" {
			t.Errorf("labels (-want +got):\n%s", diff)
		}
	}

	t.Run("an operator started later takes the last report as its baseline", func(t *testing.T) {
		stop()
		c := crashLooping(e.ns, uid, 3)
		c.Workloads[0].RevisionID = "rev-3"
		e.report(id, c) // replaced while no operator ran: not counted
		e.metrics = operator.NewMetrics()
		e.start(time.Minute)
		e.waitDevice(id, "the last report on the Device", func(d *fleetv1.Device) bool {
			return restartsOf(d, "api", "api") == 3 && d.Status.Workloads[0].Revision == "rev-3"
		})
		c = crashLooping(e.ns, uid, 5)
		c.Workloads[0].RevisionID = "rev-3"
		e.report(id, c)
		testenv.Eventually(t, "restarts counted by the new operator", 60*time.Second, func() bool { return e.restarts("api") > 0 })
		if v := e.restarts("api"); v != 2 {
			t.Errorf("the new operator counted %v restarts, want 2 (from its baseline, the last report before it started)", v)
		}
	})
}

func TestAContainersReportNamingAnotherDeviceIsRefused(t *testing.T) {
	e := newDevEnv(t)
	e.skips = events.NewSkipCounter()
	id, other, barrier := e.id("rpi-1"), e.id("rpi-2"), e.id("rpi-3")
	e.create(id, nil)
	e.create(other, nil)
	e.create(barrier, nil)
	e.start(time.Minute)
	e.waitDevice(id, "Unknown liveness", func(d *fleetv1.Device) bool { return d.Status.Liveness == fleetv1.LivenessUnknown })

	// rpi-1, on its own subject, speaks for rpi-2 (the auth callout lets
	// a device publish on its own subjects only, so this is all it can
	// try).
	forged, err := events.New(events.Keys{Device: other}, crashLooping(e.ns, "uid-1", 9))
	if err != nil {
		t.Fatal(err)
	}
	subject, err := events.ReportSubject(id, events.ReportContainers)
	if err != nil {
		t.Fatal(err)
	}
	mismatched := e.skips.Skipped(events.StreamTelemetry, events.ReasonSubjectMismatch)
	natstest.PublishStored(t, e.store.JetStream().Conn(), &nats.Msg{Subject: subject, Data: marshal(t, forged)})
	// The reader reads the stream in order: once the barrier's report is
	// on its Device, the forged one was read.
	e.report(barrier, crashLooping(e.ns, "uid-1", 1))
	e.waitDevice(barrier, "the barrier's workloads", func(d *fleetv1.Device) bool { return restartsOf(d, "api", "api") == 1 })
	if got := e.skips.Skipped(events.StreamTelemetry, events.ReasonSubjectMismatch); got != mismatched+1 {
		t.Errorf("%d records refused for naming another device, want %d (the forged one)", got, mismatched+1)
	}
	for _, dev := range []string{id, other} {
		if d := e.get(dev); d.Status.Workloads != nil || d.Status.DegradedWorkloads != 0 {
			t.Errorf("Device %s has workloads %+v after a report on %s's subject naming %s", dev, d.Status.Workloads, id, other)
		}
	}
}

// family gathers one metric family of m; nil when it has no series.
func family(t *testing.T, m *operator.Metrics, name string) *dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.Collectors()...)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

package fleetview_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/score"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../../k8s/config/crd"}})
}

// wait is how long a test waits for the fleet to reach a state: generous,
// the machine may be loaded.
const wait = 90 * time.Second

// fleet is a real one-namespace fleet: the shared API server, an embedded
// JetStream, the operator, and the test playing the agents.
type fleet struct {
	t     *testing.T
	ctx   context.Context
	c     client.Client
	store *events.Store
	ns    string
}

func newFleet(t *testing.T, ns string, withOperator bool) *fleet {
	t.Helper()
	srv := kubeapi.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	scheme := runtime.NewScheme()
	if err := fleetv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(srv.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	_, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	f := &fleet{t: t, ctx: ctx, c: c, store: st, ns: ns}
	if !withOperator {
		return f
	}
	opCtx, opCancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- operator.Run(opCtx, operator.Options{RESTConfig: srv.RESTConfig(), Store: st, Reader: st, IntentKV: kv, Devices: st,
			StaleAfter: 10 * time.Second, StatusInterval: 100 * time.Millisecond, SeveralPerProcess: true,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
	}()
	t.Cleanup(func() {
		opCancel()
		if err := <-done; err != nil {
			t.Errorf("operator.Run: %v", err)
		}
	})
	return f
}

func (f *fleet) device(name string, labels map[string]string) {
	f.t.Helper()
	d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, Labels: labels},
		Spec: fleetv1.DeviceSpec{IdentitySubject: "sub-" + name}}
	if err := f.c.Create(f.ctx, d); err != nil {
		f.t.Fatal(err)
	}
}

// report stores a device's report as its agent does.
func (f *fleet) report(device string, d events.Data) {
	f.t.Helper()
	ev, err := events.New(events.Keys{Device: device}, d)
	if err != nil {
		f.t.Fatal(err)
	}
	natstest.Report(f.t, f.ctx, f.store, ev)
}

// heartbeats reports a heartbeat of each device every half second until
// the test ends, and counts them.
func (f *fleet) heartbeats(n *atomic.Int64, devices ...string) {
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	f.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			for _, d := range devices {
				ev, err := events.New(events.Keys{Device: d}, events.DeviceHeartbeat{AgentVersion: "v1.4.2", Uptime: time.Minute})
				if err == nil && f.store.Report(ctx, ev) == nil {
					n.Add(1)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// revision waits for the Deployment's revision of generation gen.
func (f *fleet) revision(name string, gen int64) events.DeploymentRevisionCreated {
	f.t.Helper()
	subj, err := events.DeploymentIntentSubject(f.ns, name)
	if err != nil {
		f.t.Fatal(err)
	}
	var rev events.DeploymentRevisionCreated
	testenv.Eventually(f.t, fmt.Sprintf("revision %d of %s", gen, name), wait, func() bool {
		for r, err := range f.store.Replay(f.ctx, subj, events.FromStart()) {
			if err != nil {
				continue
			}
			if d, err := events.Decode[events.DeploymentRevisionCreated](r.Event); err == nil && d.Generation == gen {
				rev = d
				return true
			}
		}
		return false
	})
	return rev
}

func (f *fleet) workload(device string, rev events.DeploymentRevisionCreated, name string, phase events.WorkloadPhase, errText string) {
	f.t.Helper()
	f.report(device, events.WorkloadStatus{Namespace: f.ns, Deployment: name, UID: rev.UID, Generation: rev.Generation,
		RevisionID: rev.RevisionID, Phase: phase, Error: errText, Since: time.Now()})
}

// liveView starts an informer cache on the API server and a live View on
// it and the streams, running until the test ends.
func (f *fleet) liveView(skips *events.SkipCounter) *fleetview.View {
	f.t.Helper()
	srv := kubeapi.Shared(f.t)
	scheme := runtime.NewScheme()
	if err := fleetv1.AddToScheme(scheme); err != nil {
		f.t.Fatal(err)
	}
	ca, err := cache.New(srv.RESTConfig(), cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{f.ns: {}}})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- ca.Start(ctx) }()
	v, err := fleetview.NewLive(fleetview.Options{Cache: ca, Informers: ca, Streams: f.store, Namespace: f.ns, Skips: skips})
	if err != nil {
		f.t.Fatal(err)
	}
	runDone := make(chan error, 1)
	go func() { runDone <- v.Run(ctx) }()
	f.t.Cleanup(func() {
		cancel()
		if err := <-runDone; err != nil {
			f.t.Errorf("View.Run: %v", err)
		}
		if err := <-cacheDone; err != nil {
			f.t.Errorf("cache: %v", err)
		}
	})
	if !ca.WaitForCacheSync(f.ctx) {
		f.t.Fatal("the informer cache did not sync")
	}
	return v
}

// changes collects every page a View's change feed names, until the test
// ends.
type changes struct {
	seen atomic.Pointer[map[fleetview.PageRef]bool]
	all  atomic.Bool
}

func watchChanges(t *testing.T, ctx context.Context, v *fleetview.View) *changes {
	c := &changes{}
	m := map[fleetview.PageRef]bool{}
	c.seen.Store(&m)
	ch := v.Changes(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ch := range ch {
			next := map[fleetview.PageRef]bool{}
			for k := range *c.seen.Load() {
				next[k] = true
			}
			for _, p := range ch.Pages {
				next[p] = true
			}
			if ch.All {
				c.all.Store(true)
			}
			c.seen.Store(&next)
		}
	}()
	t.Cleanup(func() { <-done })
	return c
}

func (c *changes) saw(p fleetview.PageRef) bool { return c.all.Load() || (*c.seen.Load())[p] }

func TestLiveViewOfARealFleet(t *testing.T) {
	f := newFleet(t, "view-live", true)
	v := f.liveView(nil)
	feedCtx, stopFeed := context.WithCancel(f.ctx)
	defer stopFeed()
	feed := watchChanges(t, feedCtx, v)

	f.device("web-1", map[string]string{"role": "web", "canary": "true", "site": "paris"})
	f.device("web-2", map[string]string{"role": "web", "site": "paris"})
	f.device("web-3", map[string]string{"role": "web", "site": "lyon"})
	f.device("quiet-1", map[string]string{"role": "db"})
	f.device("gone-1", map[string]string{"role": "db"})
	var beats atomic.Int64
	f.heartbeats(&beats, "web-1", "web-2", "web-3")
	f.report("gone-1", events.DeviceHeartbeat{AgentVersion: "v1.3.0"})
	// Hostile inventory: odd bytes, control characters, a huge field.
	f.report("web-2", events.DeviceInventory{OS: "Debian\x00\x1b[2J\xff", Arch: "arm64", Kernel: strings.Repeat("k", 20000), AgentVersion: "v1.4.2\nforged"})

	dep := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns},
		Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "web"}},
			Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "web", Image: "registry.example.com/web:v1"}}}}}}
	testenv.Eventually(t, "the three web devices online (the operator mirrors their heartbeats)", wait, func() bool {
		p, err := v.Devices(f.ctx, fleetview.DeviceQuery{Selector: "role=web", Liveness: fleetview.LivenessOnline})
		return err == nil && p.Matched == 3
	})
	if err := f.c.Create(f.ctx, dep); err != nil {
		t.Fatal(err)
	}
	rev := f.revision("web", 1)
	f.workload("web-1", rev, "web", events.WorkloadConverged, "")
	testenv.Eventually(t, "the canary stage passed on the Deployment page", wait, func() bool {
		d, err := v.Deployment(f.ctx, f.ns, "web")
		return err == nil && d.CanaryStage != nil && d.CanaryStage.Gate == fleetview.GatePassed
	})
	f.workload("web-2", rev, "web", events.WorkloadConverged, "")
	f.workload("web-3", rev, "web", events.WorkloadFailed, "container web exited with code 1")
	// A report forged on web-3's subject in web-2's name: the stream keeps
	// it, no read may attribute it to either device.
	forged, err := events.New(events.Keys{Device: "web-2"}, events.WorkloadStatus{Namespace: f.ns, Deployment: "web", UID: rev.UID,
		Generation: rev.Generation, RevisionID: rev.RevisionID, Phase: events.WorkloadFailed, Error: "forged failure", Since: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := events.Message(forged)
	if err != nil {
		t.Fatal(err)
	}
	msg.Subject = "fleet.report.web-3.workload"
	natstest.PublishStored(t, f.store.JetStream().Conn(), msg)

	var page fleetview.DeploymentDetail
	testenv.Eventually(t, "the Deployment page shows the failed target", wait, func() bool {
		page, err = v.Deployment(f.ctx, f.ns, "web")
		// The phase is the cache's, the targets' states the streams':
		// each comes on its own time.
		failed := slices.ContainsFunc(page.Devices, func(r fleetview.TargetRow) bool { return r.Device == "web-3" && r.State == fleetview.TargetFailed })
		return err == nil && page.Phase == string(fleetv1.PhaseFailed) && page.LatestFailure != nil && len(page.Devices) == 3 && failed
	})
	t.Run("the Deployment page has per-device state, the canary stage and the revisions", func(t *testing.T) {
		got := map[string]fleetview.TargetState{}
		for _, r := range page.Devices {
			got[r.Device] = r.State
			if strings.Contains(r.Error, "forged") {
				t.Errorf("device %s shows the forged error", r.Device)
			}
		}
		want := map[string]fleetview.TargetState{"web-1": fleetview.TargetSucceeded, "web-2": fleetview.TargetSucceeded, "web-3": fleetview.TargetFailed}
		for d, s := range want {
			if got[d] != s {
				t.Errorf("device %s is %s, want %s", d, got[d], s)
			}
		}
		if page.Devices[0].Device != "web-3" {
			t.Errorf("the failed target is not first: %+v", page.Devices)
		}
		if page.LatestFailure.Device != "web-3" || page.LatestFailure.Error != "container web exited with code 1" {
			t.Errorf("latest failure %+v", page.LatestFailure)
		}
		if page.Targets.Total != 3 || page.Targets.Succeeded != 2 || page.Targets.Failed != 1 {
			t.Errorf("targets %+v", page.Targets)
		}
		if page.CanaryStage == nil || page.CanaryStage.Canaries != 1 || page.CanaryStage.Succeeded != 1 {
			t.Errorf("canary stage %+v", page.CanaryStage)
		}
		if len(page.Revisions) != 1 || !page.Revisions[0].Current || page.Revisions[0].RevisionID != rev.RevisionID {
			t.Errorf("revisions %+v", page.Revisions)
		}
		if len(page.Timeline) == 0 || len(page.Services) != 1 {
			t.Errorf("%d timeline entries, services %+v", len(page.Timeline), page.Services)
		}
	})
	t.Run("a device page attributes only its own reports", func(t *testing.T) {
		for _, tc := range []struct {
			device string
			state  fleetview.TargetState
		}{{"web-2", fleetview.TargetSucceeded}, {"web-3", fleetview.TargetFailed}} {
			var d fleetview.DeviceDetail
			testenv.Eventually(t, tc.device+"'s page lists the Deployment", wait, func() bool {
				d, err = v.Device(f.ctx, tc.device)
				return err == nil && len(d.Deployments) == 1 && d.Deployments[0].Reported != nil
			})
			if d.Heartbeats.Kept == 0 || d.Heartbeats.Last.IsZero() || len(d.Heartbeats.AgentVersions) == 0 {
				t.Errorf("%s's heartbeats: %+v", tc.device, d.Heartbeats)
			}
			if got := d.Deployments[0]; got.State != tc.state || !got.Desired || got.Generation != rev.Generation {
				t.Errorf("%s runs %+v, want state %s of generation %d", tc.device, got, tc.state, rev.Generation)
			}
			for _, e := range d.Timeline {
				if strings.Contains(e.Summary, "forged") {
					t.Errorf("%s's timeline shows the forged report: %+v", tc.device, e)
				}
			}
		}
	})
	t.Run("hostile inventory is bounded and readable", func(t *testing.T) {
		var d fleetview.DeviceDetail
		testenv.Eventually(t, "web-2's inventory", wait, func() bool {
			d, err = v.Device(f.ctx, "web-2")
			return err == nil && d.Inventory.Arch == "arm64"
		})
		for _, s := range []string{d.Inventory.OS, d.Inventory.Kernel, d.Inventory.AgentVersion} {
			if len(s) > fleetview.MaxFieldLength+8 || strings.ContainsAny(s, "\x00\x1b\n") {
				t.Errorf("inventory field %q (%d bytes) is not bounded", s, len(s))
			}
		}
	})
	t.Run("the overview and the alerts", func(t *testing.T) {
		testenv.Eventually(t, "gone-1 stale and alerted, the Deployment alerted", wait, func() bool {
			as, err := v.Alerts(f.ctx)
			if err != nil {
				return false
			}
			kinds := map[string]bool{}
			for _, a := range as {
				kinds[string(a.Kind)+" "+a.Page.Key] = true
			}
			return kinds["device-stale gone-1"] && kinds["deployment-failing "+f.ns+"/web"]
		})
		o, err := v.Overview(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if o.Devices.Total != 5 || o.Devices.Stale+o.Devices.Offline < 2 || o.Alerts.Total < 2 {
			t.Errorf("overview %+v", o)
		}
		for _, p := range o.Deployments {
			if p.Phase == string(fleetv1.PhaseFailed) && p.Count != 1 {
				t.Errorf("%d Deployments Failed, want 1", p.Count)
			}
		}
	})
	t.Run("the device list filters and refuses a bad selector naming it", func(t *testing.T) {
		p, err := v.Devices(f.ctx, fleetview.DeviceQuery{Selector: "role=web,site=paris"})
		if err != nil || p.Matched != 2 || p.Total != 5 {
			t.Errorf("paris web devices: %+v, %v", p, err)
		}
		_, err = v.Devices(f.ctx, fleetview.DeviceQuery{Selector: "role in (web"})
		if !errors.Is(err, fleetview.ErrInvalidQuery) || !strings.Contains(err.Error(), "selector") {
			t.Errorf("bad selector: %v", err)
		}
		if _, err := v.Device(f.ctx, "nobody"); !errors.Is(err, fleetview.ErrNotFound) {
			t.Errorf("unknown device: %v", err)
		}
	})
	t.Run("the trend counts reports, failures and heartbeats, never the forged report", func(t *testing.T) {
		testenv.Eventually(t, "three reports, one failure, the heartbeats", wait, func() bool {
			// (The TaskRun subtest below adds a report; this one runs first.)
			tr, err := v.Trend(f.ctx)
			if err != nil {
				return false
			}
			reports, failures, hb := 0, 0, 0
			for _, h := range tr.Hours {
				reports, failures, hb = reports+h.Reports, failures+h.Failures, hb+h.Heartbeats
			}
			return reports == 3 && failures == 1 && hb >= 4
		})
	})
	t.Run("a restarted view recomputes reports and failures; heartbeats before its start are partial", func(t *testing.T) {
		again := f.liveView(nil)
		var tr fleetview.Trend
		testenv.Eventually(t, "the new view's trend", wait, func() bool {
			tr, err = again.Trend(f.ctx)
			if err != nil {
				return false
			}
			reports, failures := 0, 0
			for _, h := range tr.Hours {
				reports, failures = reports+h.Reports, failures+h.Failures
			}
			return reports == 3 && failures == 1
		})
		if tr.HeartbeatsSince.IsZero() {
			t.Fatal("the new view has no live heartbeat count")
		}
		for _, h := range tr.Hours {
			if h.Start.Before(tr.HeartbeatsSince) != h.HeartbeatsPartial {
				t.Errorf("hour %s: partial %v, the live count started at %s", h.Start, h.HeartbeatsPartial, tr.HeartbeatsSince)
			}
		}
	})
	t.Run("the fleet as of a past time", func(t *testing.T) {
		before, err := v.FleetAt(f.ctx, rev0Time(t, page))
		if err != nil {
			t.Fatal(err)
		}
		// The API server is shared by the package's tests, and this test's
		// operator follows every namespace: only this test's namespace counts.
		if mine := ownDeployments(before.Deployments, f.ns); len(mine) != 0 {
			t.Errorf("before the revision the fleet had Deployments: %+v", mine)
		}
		now, err := v.FleetAt(f.ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		if mine := ownDeployments(now.Deployments, f.ns); len(mine) != 1 || mine[0].Phase != string(fleetv1.PhaseFailed) {
			t.Errorf("now: %+v", mine)
		}
	})
	t.Run("the change feed names the pages that changed", func(t *testing.T) {
		for _, p := range []fleetview.PageRef{{Kind: fleetview.PageDeployment, Key: f.ns + "/web"}, {Kind: fleetview.PageDevice, Key: "web-3"},
			{Kind: fleetview.PageOverview}, {Kind: fleetview.PageTrend}} {
			testenv.Eventually(t, fmt.Sprintf("a change of %v", p), wait, func() bool { return feed.saw(p) })
		}
	})
	t.Run("a TaskRun page has every target's result, from the streams", func(t *testing.T) {
		tr := &fleetv1.TaskRun{ObjectMeta: metav1.ObjectMeta{Name: "upgrade", Namespace: f.ns},
			Spec: fleetv1.TaskRunSpec{Task: fleetv1.TaskSystemUpgrade, TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "paris"}}}}
		if err := f.c.Create(f.ctx, tr); err != nil {
			t.Fatal(err)
		}
		subj, err := events.TaskRunIntentSubject(f.ns, "upgrade")
		if err != nil {
			t.Fatal(err)
		}
		var created events.TaskRunCreated
		testenv.Eventually(t, "taskrun.created", wait, func() bool {
			for r, err := range f.store.Replay(f.ctx, subj, events.FromStart()) {
				if err != nil {
					continue
				}
				if d, err := events.Decode[events.TaskRunCreated](r.Event); err == nil {
					created = d
					return true
				}
			}
			return false
		})
		ev, err := events.New(events.Keys{Device: "web-1"}, events.TaskStatus{Namespace: f.ns, TaskRun: "upgrade", UID: created.UID, Task: created.Task,
			Phase: events.TaskSucceeded, Since: time.Now().UTC()}, events.WithCorrelation(created.UID, created.Generation))
		if err != nil {
			t.Fatal(err)
		}
		natstest.Report(t, f.ctx, f.store, ev)
		var d fleetview.TaskRunDetail
		testenv.Eventually(t, "the TaskRun page with web-1 succeeded", wait, func() bool {
			d, err = v.TaskRun(f.ctx, f.ns, "upgrade")
			if err != nil {
				return false
			}
			for _, r := range d.Results {
				if r.Device == "web-1" && r.Phase == events.TaskSucceeded {
					return true
				}
			}
			return false
		})
		if len(d.Results) != 2 || d.Task != string(fleetv1.TaskSystemUpgrade) || len(d.Timeline) == 0 {
			t.Errorf("TaskRun page: %+v", d)
		}
		list, err := v.TaskRuns(f.ctx)
		if err != nil || len(list) != 1 || list[0].Name != "upgrade" {
			t.Errorf("TaskRun list %+v, %v", list, err)
		}
	})
	t.Run("a deleted Deployment's page is its history", func(t *testing.T) {
		if err := f.c.Delete(f.ctx, &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns}}); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "the Deployment gone from the list, its page marked deleted", wait, func() bool {
			list, err := v.Deployments(f.ctx)
			if err != nil || len(list) != 0 {
				return false
			}
			d, err := v.Deployment(f.ctx, f.ns, "web")
			return err == nil && d.Deleted && len(d.Revisions) == 1 && d.RevisionID == rev.RevisionID
		})
	})
}

// rev0Time is an instant before the page's first revision.
func rev0Time(t *testing.T, page fleetview.DeploymentDetail) time.Time {
	t.Helper()
	if len(page.Revisions) == 0 {
		t.Fatal("no revision")
	}
	return page.Revisions[len(page.Revisions)-1].Created.Add(-time.Millisecond)
}

// poison stores every poison variant of base's subject as a device can.
func (f *fleet) poison(base events.Event) int {
	f.t.Helper()
	subject, err := base.Subject()
	if err != nil {
		f.t.Fatal(err)
	}
	cases := poisontest.For(f.t, base)
	for _, tc := range cases {
		m := &nats.Msg{Subject: subject, Data: tc.Payload}
		if natstest.DeviceWritten(subject) {
			natstest.PublishStored(f.t, f.store.JetStream().Conn(), m)
		} else if _, err := f.store.JetStream().PublishMsg(f.ctx, m); err != nil {
			f.t.Fatal(err)
		}
	}
	return len(cases)
}

func mustEvent(t *testing.T, keys events.Keys, d events.Data) events.Event {
	t.Helper()
	ev, err := events.New(keys, d)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestLiveViewSkipsAndCountsPoisonAndGoesOn(t *testing.T) {
	f := newFleet(t, "view-poison", false)
	f.device("edge-1", map[string]string{"role": "web"})
	skips := events.NewSkipCounter()
	v := f.liveView(skips)
	dev := events.Keys{Device: "edge-1"}
	f.poison(mustEvent(t, dev, events.DeviceHeartbeat{AgentVersion: "1"}))
	f.poison(mustEvent(t, dev, events.DeviceInventory{OS: "linux"}))
	f.poison(mustEvent(t, dev, events.WorkloadStatus{Namespace: f.ns, Deployment: "web", UID: "u", Generation: 1, Phase: events.WorkloadFailed}))
	f.poison(mustEvent(t, dev, events.TaskStatus{Namespace: f.ns, TaskRun: "up", UID: "u", Phase: events.TaskFailed}))
	f.poison(mustEvent(t, dev, events.CommandResult{CommandID: "c", Command: "reconcile-now"}))
	f.poison(mustEvent(t, dev, events.NewWorkloadHealth(events.TypeWorkloadDegraded, events.WorkloadHealth{Namespace: f.ns, Deployment: "web", UID: "u",
		Generation: 1, Reason: events.HealthCrashLoop})))
	f.poison(mustEvent(t, dev, events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: f.ns, Deployment: "web"}}}))
	f.poison(mustEvent(t, events.Keys{Namespace: f.ns, Name: "web"}, events.DeploymentRevisionCreated{UID: "u", Generation: 1}))
	f.poison(mustEvent(t, events.Keys{Namespace: f.ns, Name: "web"}, events.NewRolloutTransition(events.TypeRolloutStarted, events.RolloutTransition{UID: "u", Generation: 1})))
	// After the poison, one valid heartbeat and one valid failing report.
	f.report("edge-1", events.DeviceHeartbeat{AgentVersion: "v1"})
	f.report("edge-1", events.WorkloadStatus{Namespace: f.ns, Deployment: "web", UID: "u", Generation: 1, RevisionID: "r1",
		Phase: events.WorkloadFailed, Error: "exit 1", Since: time.Now()})
	f.report("edge-1", events.DeviceContainers{Workloads: []events.WorkloadContainers{{Namespace: f.ns, Deployment: "web", UID: "u", Generation: 1,
		RevisionID: "r1", Containers: []events.ContainerState{{Name: "web", Role: events.ContainerRoleService, State: "running", Restarts: 4}}}}})

	testenv.Eventually(t, "the trend counts the valid heartbeat and report past the poison", wait, func() bool {
		tr, err := v.Trend(f.ctx)
		if err != nil {
			return false
		}
		reports, failures, hb := 0, 0, 0
		for _, h := range tr.Hours {
			reports, failures, hb = reports+h.Reports, failures+h.Failures, hb+h.Heartbeats
		}
		if reports > 1 || hb > 1 {
			t.Fatalf("the trend counts poison: %d reports, %d heartbeats, want 1 and 1", reports, hb)
		}
		return reports == 1 && failures == 1 && hb == 1
	})
	for _, s := range []string{events.StreamTelemetry, events.StreamReports} {
		if skips.Skipped(s, "") == 0 {
			t.Errorf("no record of %s counted as skipped", s)
		}
	}
	d, err := v.Device(f.ctx, "edge-1")
	if err != nil {
		t.Fatalf("the device page of a poisoned device: %v", err)
	}
	if len(d.Deployments) != 1 || d.Deployments[0].Reported == nil || d.Deployments[0].Reported.Error != "exit 1" || d.Deployments[0].State != fleetview.TargetRemoved {
		t.Errorf("edge-1's Deployments: %+v (want its one valid report, of a Deployment it no longer should run)", d.Deployments)
	}
	if len(d.Workloads) != 1 || len(d.Workloads[0].Containers) != 1 || d.Workloads[0].Containers[0].Restarts != 4 {
		t.Errorf("edge-1's containers: %+v (want its one valid container report, past the poison)", d.Workloads)
	}
	if _, err := v.FleetAt(f.ctx, time.Now()); err != nil {
		t.Errorf("the fleet as of now, with poison in every stream: %v", err)
	}
	if _, err := v.Deployment(f.ctx, f.ns, "web"); err != nil && !errors.Is(err, fleetview.ErrNotFound) {
		t.Errorf("the page of a Deployment with only poison: %v", err)
	}
}

// ownDeployments keeps the Deployments of namespace ns.
func ownDeployments(ds []fleetview.DeploymentAt, ns string) []fleetview.DeploymentAt {
	var mine []fleetview.DeploymentAt
	for _, d := range ds {
		if d.Namespace == ns {
			mine = append(mine, d)
		}
	}
	return mine
}

package fleetview_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1 "k8s.io/api/core/v1"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// deviceQueries are the device-list pages the benchmark serves.
var deviceQueries = []struct {
	name string
	q    fleetview.DeviceQuery
}{
	{"every device, first page", fleetview.DeviceQuery{}},
	{"selector", fleetview.DeviceQuery{Selector: "region=eu-west,tier in (edge),!blacklist", Limit: 100}},
	{"selector and search, a later page", fleetview.DeviceQuery{Selector: "tier=edge", Search: "RPI", Offset: 500, Limit: 100}},
	{"liveness and search miss", fleetview.DeviceQuery{Liveness: fleetview.LivenessStale, Search: "no-such-text"}},
}

func benchQueries(b *testing.B, v fleetview.Source) {
	ctx := context.Background()
	for _, bc := range deviceQueries {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, err := v.Devices(ctx, bc.q)
				if err != nil {
					b.Fatal(err)
				}
				if p.Total != 10000 {
					b.Fatalf("%d devices", p.Total)
				}
			}
		})
	}
}

// BenchmarkDeviceList10000 is one device-list page of a 10,000-device fleet:
// list, filter, sort and page. "mock" serves the generated fleet from
// memory; "informer cache" is the live View reading 10,000 Device CRs
// (the mock's names and labels) from a controller-runtime informer cache
// synced with a real API server. The figures are in docs/dashboard.md
// (the dashboard's bound is 300 ms of server time per page).
func BenchmarkDeviceList10000(b *testing.B) {
	mock := fleetview.Mock(1, 10000)
	b.Run("mock", func(b *testing.B) { benchQueries(b, mock) })
	b.Run("informer cache", func(b *testing.B) { benchQueries(b, cachedFleet(b, mock)) })
}

// cachedFleet creates the mock's devices as Device CRs in a namespace of the
// shared API server (statuses are the mock's) and returns a live View on an
// informer cache of them.
func cachedFleet(b *testing.B, mock *fleetview.View) *fleetview.View {
	b.Helper()
	srv := kubeapi.Shared(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	b.Cleanup(cancel)
	scheme := runtime.NewScheme()
	if err := fleetv1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	c, err := client.New(srv.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	ns := fmt.Sprintf("view-bench-%d", time.Now().UnixNano())
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = c.DeleteAllOf(context.Background(), &fleetv1.Device{}, client.InNamespace(ns))
		_ = c.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	var rows []fleetview.DeviceRow
	for off := 0; off < 10000; off += fleetview.MaxPageSize {
		p, err := mock.Devices(ctx, fleetview.DeviceQuery{Offset: off, Limit: fleetview.MaxPageSize})
		if err != nil {
			b.Fatal(err)
		}
		rows = append(rows, p.Items...)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, r := range rows {
		g.Go(func() error {
			labels := map[string]string{}
			for _, l := range r.Labels {
				labels[l.Key] = l.Value
			}
			d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: r.ID, Namespace: ns, Labels: labels},
				Spec: fleetv1.DeviceSpec{IdentitySubject: "sub-" + r.ID}}
			if err := c.Create(gctx, d); err != nil {
				return err
			}
			if r.LastHeartbeat.IsZero() {
				return nil
			}
			hb := metav1.NewTime(r.LastHeartbeat)
			d.Status = fleetv1.DeviceStatus{LastHeartbeat: &hb, Liveness: fleetv1.LivenessOnline,
				Inventory: &fleetv1.DeviceInventory{OS: r.Inventory.OS, Arch: r.Inventory.Arch, Kernel: r.Inventory.Kernel, AgentVersion: r.Inventory.AgentVersion}}
			if r.Liveness != fleetview.LivenessOnline {
				d.Status.Liveness = fleetv1.LivenessStale
			}
			return c.Status().Update(gctx, d)
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	ca, err := cache.New(srv.RESTConfig(), cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		b.Fatal("the informer cache did not sync")
	}
	_, st := natstest.Provisioned(b)
	v, err := fleetview.NewLive(fleetview.Options{Cache: ca, Streams: st})
	if err != nil {
		b.Fatal(err)
	}
	// The cache may still be filling from the list that synced it.
	total := 0
	if err := testenv.Poll(ctx, 5*time.Minute, func() bool {
		p, err := v.Devices(ctx, fleetview.DeviceQuery{Limit: 1})
		total = p.Total
		return err == nil && p.Total == 10000
	}); err != nil {
		b.Fatalf("%v: %d devices in the cache, want 10000", err, total)
	}
	return v
}

// BenchmarkOverview10000 is the overview page (liveness counts, phases,
// alerts) of a 10,000-device fleet served from memory.
func BenchmarkOverview10000(b *testing.B) {
	ctx := context.Background()
	v := fleetview.Mock(1, 10000)
	b.ReportAllocs()
	for b.Loop() {
		o, err := v.Overview(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if o.Devices.Total != 10000 {
			b.Fatalf("%d devices", o.Devices.Total)
		}
	}
}

// BenchmarkDeploymentPage1000 is a Deployment page whose revision has 1,000
// targets that each reported twice, read from a real JetStream: the
// history package's replay of its intent and rollout subjects and of the
// workload reports since its first revision, folded by the projections
// ("replayed"); and the same page while the View runs, served from its
// memo ("memoized while running").
func BenchmarkDeploymentPage1000(b *testing.B) {
	srv := kubeapi.Shared(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	_, st := natstest.Provisioned(b)
	targets := make([]string, 1000)
	for i := range targets {
		targets[i] = fmt.Sprintf("edge-%04d", i)
	}
	rev := events.DeploymentRevisionCreated{UID: "bench-uid", Generation: 1, RevisionID: "1-bench", ScoreDigest: "sha256:bench",
		Score: []byte(`{"type":"PodmanV0","data":{"services":[]}}`), Targets: targets}
	ev, err := events.New(events.Keys{Namespace: "bench", Name: "web"}, rev, events.WithCorrelation(rev.UID, rev.Generation))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Append(ctx, ev); err != nil {
		b.Fatal(err)
	}
	for _, phase := range []events.WorkloadPhase{events.WorkloadApplying, events.WorkloadConverged} {
		var evs []events.Event
		for _, d := range targets {
			ev, err := events.New(events.Keys{Device: d}, events.WorkloadStatus{Namespace: "bench", Deployment: "web", UID: rev.UID,
				Generation: 1, RevisionID: rev.RevisionID, Phase: phase, Since: time.Now()})
			if err != nil {
				b.Fatal(err)
			}
			evs = append(evs, ev)
		}
		if err := st.Report(ctx, evs...); err != nil {
			b.Fatal(err)
		}
	}
	scheme := runtime.NewScheme()
	if err := fleetv1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	ca, err := cache.New(srv.RESTConfig(), cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{"bench": {}}})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = ca.Start(ctx) }()
	if !ca.WaitForCacheSync(ctx) {
		b.Fatal("the informer cache did not sync")
	}
	v, err := fleetview.NewLive(fleetview.Options{Cache: ca, Streams: st})
	if err != nil {
		b.Fatal(err)
	}
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		d, err := v.Deployment(ctx, "bench", "web")
		return err == nil && len(d.Devices) == 1000 && d.Devices[999].State == fleetview.TargetSucceeded
	}); err != nil {
		b.Fatalf("%v: the page never showed 1,000 converged targets", err)
	}
	page := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := v.Deployment(ctx, "bench", "web"); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("replayed", page)
	// While the View runs it follows the streams and keeps the timeline
	// until a change of the Deployment is seen.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- v.Run(runCtx) }()
	b.Run("memoized while running", page)
	stop()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

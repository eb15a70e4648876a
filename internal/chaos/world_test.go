package chaos_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/controlplane"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/internal/chaos"
	"github.com/nationtech/harmony-fleet/internal/natscluster"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/projections"
	"github.com/nationtech/harmony-fleet/score"
)

// Names of the world.
const (
	adminUser    = "chaos-admin" // static FLEET user: the ledger, the test's reads, operator processes
	ledgerStream = "CHAOS_LEDGER"
	ledgerSubj   = "chaos.ledger"
	depName      = "api"
)

// runs numbers the namespaces of this process's tests (the API server is
// shared).
var runs atomic.Int32

// worldOptions size a world.
type worldOptions struct {
	servers    int // NATS servers
	devices    int
	perProcess int // devices per agent process
	// calloutReplicas are the plane's in-process callout replicas.
	calloutReplicas int
	// calloutProcs, when positive, runs the callout as that many
	// fleet-authcallout processes (from bins) instead of in the plane.
	calloutProcs int
	bins         string
	// inProcessOperator runs operator.Run in the test process on the
	// plane's connection (through the callout); otherwise the test starts
	// fleet-operator processes itself.
	inProcessOperator bool
}

// world is a Fleet control plane on a NATS cluster: the servers (separate
// processes), the plane's provider, callout and operator connection, the
// API server, the agents (separate processes) and the ledger.
type world struct {
	t       *testing.T
	ctx     context.Context
	o       worldOptions
	cluster *natscluster.Cluster
	plane   *controlplane.Plane
	st      *events.Store
	kv      jetstream.KeyValue
	// admin is a static-user connection for the test's own reads and the
	// ledger; adminJS is JetStream on it.
	admin     *nats.Conn
	adminJS   jetstream.JetStream
	adminPass string
	kube      *kubeapi.Server
	c         client.Client
	ns        string
	devices   []string
	keys      string
	agents    []*agentProc
	callouts  []*opProc
	// calloutArgs start a fleet-authcallout process.
	calloutArgs []string
	events      chan connEvent
	connMu      sync.Mutex // guards conns
	conns       []connEvent
	ledger      *chaos.Ledger
	stopLedger  func()
	ledgerDone  chan error
	logs        *testenv.SyncBuffer
}

// startWorld starts everything; the test's cleanup stops it.
func startWorld(t *testing.T, ctx context.Context, o worldOptions) *world {
	t.Helper()
	w := &world{t: t, ctx: ctx, o: o, events: make(chan connEvent, 1024), logs: &testenv.SyncBuffer{}}
	w.kube = kubeapi.Shared(t)
	logger := slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelWarn}))

	secrets, err := controlplane.NewSecrets()
	if err != nil {
		t.Fatal(err)
	}
	if w.adminPass, err = controlplane.RandomPassword(); err != nil {
		t.Fatal(err)
	}
	static := &authcallout.StaticUser{Name: adminUser, Password: w.adminPass, PasswordVar: "CHAOS_ADMIN_PASSWORD",
		Comment: "chaos tests only: the ledger, the test's reads and the operator processes."}
	conf, err := secrets.ServerConfig(static)
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	w.cluster, err = natscluster.Start(ctx, natscluster.Options{N: o.servers, Dir: t.TempDir(), Config: conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d NATS servers healthy in %s", o.servers, time.Since(began).Round(time.Millisecond))
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(w.cluster.LogTails(25))
			t.Logf("control plane logs (warnings):\n%s", tail(w.logs.String(), 60))
		}
		w.cluster.Close()
	})
	po := controlplane.Options{Servers: w.cluster.ClientURLs(), Secrets: secrets, StaticUser: static,
		Replicas: o.calloutReplicas, Logger: logger, Provision: events.ProvisionOptions{Replicas: min(3, o.servers)}}
	if o.calloutProcs > 0 {
		// The provider's address is known before it serves, so that the
		// callout processes start first and answer the plane's own
		// connects.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		po.ProviderListener, po.ProviderIssuer = ln, "http://"+ln.Addr().String()
		po.ExternalCallout, po.Replicas = true, 0
		w.calloutArgs = calloutArgs(t, secrets, w.cluster.URL(), po.ProviderIssuer)
		for range o.calloutProcs {
			w.callouts = append(w.callouts, w.startCallout())
		}
		for _, p := range w.callouts {
			w.waitFor("a callout process to serve", time.Minute, func() bool { return p.said(logCalloutServing) })
		}
	}
	if w.plane, err = controlplane.Start(ctx, po); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.plane.Close(); err != nil {
			t.Errorf("control plane: %v", err)
		}
	})
	w.st, w.kv = w.plane.Store(), w.plane.Intent()
	if w.admin, err = nats.Connect(w.cluster.URL(), nats.UserInfo(adminUser, w.adminPass), nats.Name("chaos-admin"),
		nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.admin.Close)
	if w.adminJS, err = jetstream.New(w.admin); err != nil {
		t.Fatal(err)
	}
	w.record()

	// The API server: the CRDs are installed by TestMain.
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if w.c, err = client.New(w.kube.RESTConfig(), client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	w.ns = fmt.Sprintf("chaos-%d-%d", os.Getpid(), runs.Add(1))
	if err := w.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: w.ns}}); err != nil {
		t.Fatal(err)
	}

	if o.inProcessOperator {
		opCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() {
			done <- operator.Run(opCtx, operator.Options{RESTConfig: w.kube.RESTConfig(), Store: w.st, Reader: w.st, IntentKV: w.kv,
				Devices: w.st, Logger: logger.With("component", "operator"), StatusInterval: 200 * time.Millisecond, SeveralPerProcess: true})
		}()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil && !strings.Contains(err.Error(), "context canceled") {
				t.Errorf("operator: %v", err)
			}
		})
	}

	// The devices: enrolled at the provider, a Device resource each, their
	// agents in processes of perProcess devices.
	w.keys = t.TempDir()
	for i := range o.devices {
		dev := fmt.Sprintf("%s-d%d", w.ns, i+1)
		uid, err := w.plane.EnrollDevice(ctx, dev, filepath.Join(w.keys, dev+".json"))
		if err != nil {
			t.Fatal(err)
		}
		d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: dev, Namespace: w.ns, Labels: map[string]string{"role": "chaos"}},
			Spec: fleetv1.DeviceSpec{IdentitySubject: uid}}
		if err := w.c.Create(ctx, d); err != nil {
			t.Fatal(err)
		}
		w.devices = append(w.devices, dev)
	}
	for from := 0; from < len(w.devices); from += o.perProcess {
		w.agents = append(w.agents, startAgents(t, w.cluster.URL(), w.keys, w.devices[from:min(from+o.perProcess, len(w.devices))], w.events))
	}
	w.waitFor("every device to connect", 2*time.Minute, func() bool { return len(w.connectedDevices()) == len(w.devices) })
	return w
}

// calloutArgs writes the callout's secrets to files (mode 0600) and
// returns a fleet-authcallout command line naming them.
func calloutArgs(t *testing.T, s *controlplane.Secrets, natsURL, issuer string) []string {
	t.Helper()
	dir := t.TempDir()
	file := func(name, v string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	issuerSeed, err := s.Issuer.Seed()
	if err != nil {
		t.Fatal(err)
	}
	xkeySeed, err := s.XKey.Seed()
	if err != nil {
		t.Fatal(err)
	}
	return []string{"--nats-url", natsURL, "--callout-user", "fleet-authcallout", "--callout-password-file", file("callout", s.CalloutPassword),
		"--reader-user", "fleet-identity-reader", "--reader-password-file", file("reader", s.ReaderPassword),
		"--system-user", "fleet-authcallout-sys", "--system-password-file", file("sys", s.SysPassword),
		"--issuer-seed-file", file("issuer", string(issuerSeed)), "--xkey-seed-file", file("xkey", string(xkeySeed)),
		"--oidc-issuer", issuer, "--audience", devop.DefaultAudience, "--log-format", "text"}
}

// startCallout starts a fleet-authcallout process.
func (w *world) startCallout() *opProc {
	w.t.Helper()
	return startProc(w.t, "callout", filepath.Join(w.o.bins, "fleet-authcallout"), w.calloutArgs, nil)
}

// record collects the agents' connection events.
func (w *world) record() {
	go func() {
		for e := range w.events {
			w.connMu.Lock()
			w.conns = append(w.conns, e)
			w.connMu.Unlock()
		}
	}()
}

// connectedDevices are the devices whose last connection event is a
// (re)connect.
func (w *world) connectedDevices() []string {
	w.connMu.Lock()
	defer w.connMu.Unlock()
	last := map[string]string{}
	for _, e := range w.conns {
		last[e.Device] = e.Event
	}
	var out []string
	for d, ev := range last {
		if ev != "disconnected" {
			out = append(out, d)
		}
	}
	return out
}

// devicesOn counts the devices by the server their last (re)connect
// reached.
func (w *world) devicesOn() map[string]int {
	w.connMu.Lock()
	defer w.connMu.Unlock()
	at := map[string]string{}
	for _, e := range w.conns {
		if e.URL != "" {
			at[e.Device] = e.URL
		}
	}
	out := map[string]int{}
	for _, u := range at {
		name := u
		for i, cu := range w.cluster.ClientURLs() {
			if cu == u {
				name = w.cluster.Name(i)
			}
		}
		out[name]++
	}
	return out
}

// eventsSince lists the connection events from t0 on, one a line.
func (w *world) eventsSince(t0 time.Time) string {
	w.connMu.Lock()
	defer w.connMu.Unlock()
	var b strings.Builder
	for _, e := range w.conns {
		if !e.At.Before(t0) {
			fmt.Fprintf(&b, "  +%s %s %s %s\n", e.At.Sub(t0).Round(time.Millisecond), e.Device, e.Event, e.URL)
		}
	}
	return b.String()
}

// reconnectTimes returns, for each device whose connection reconnected
// after t0, how long after t0 it first did, sorted.
func (w *world) reconnectTimes(t0 time.Time) []time.Duration {
	w.connMu.Lock()
	defer w.connMu.Unlock()
	seen := map[string]bool{}
	var back []time.Duration
	for _, e := range w.conns {
		if e.At.Before(t0) || e.Event != "reconnected" || seen[e.Device] {
			continue
		}
		seen[e.Device] = true
		back = append(back, e.At.Sub(t0))
	}
	slices.Sort(back)
	return back
}

func (w *world) waitFor(what string, timeout time.Duration, cond func() bool) {
	w.t.Helper()
	if err := testenv.Poll(w.ctx, timeout, cond); err != nil {
		w.t.Fatalf("%v waiting for %s", err, what)
	}
}

// startLedger creates the ledger's stream, configured like the Fleet
// durable streams (FLEET_ROLLOUT's configuration, R3), and starts
// appending.
func (w *world) startLedger() {
	w.t.Helper()
	var cfg jetstream.StreamConfig
	for _, c := range events.StreamConfigs(events.ProvisionOptions{Replicas: min(3, w.o.servers)}) {
		if c.Name == events.StreamRollout {
			cfg = c
		}
	}
	cfg.Name, cfg.Subjects, cfg.Description = ledgerStream, []string{ledgerSubj}, "chaos tests: the acknowledged-append ledger"
	cctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	if _, err := w.adminJS.CreateOrUpdateStream(cctx, cfg); err != nil {
		w.t.Fatal(err)
	}
	var err error
	if w.ledger, err = chaos.NewLedger(w.adminJS, chaos.LedgerOptions{Stream: ledgerStream, Subject: ledgerSubj}); err != nil {
		w.t.Fatal(err)
	}
	lctx, stop := context.WithCancel(w.ctx)
	w.stopLedger, w.ledgerDone = stop, make(chan error, 1)
	go func() { w.ledgerDone <- w.ledger.Run(lctx) }()
	w.t.Cleanup(func() { w.endLedger() })
}

// endLedger stops the ledger's appends (harmless twice).
func (w *world) endLedger() {
	if w.stopLedger == nil {
		return
	}
	w.stopLedger()
	if err := <-w.ledgerDone; err != nil {
		w.t.Errorf("ledger: %v", err)
	}
	w.stopLedger = nil
}

// streamInfo is a stream's info, each request bounded: a stream without a
// leader answers nothing.
func (w *world) streamInfo(name string) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(w.ctx, time.Second)
	defer cancel()
	s, err := w.adminJS.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

// leaderOf is the index of the server leading stream name.
func (w *world) leaderOf(name string) int {
	w.t.Helper()
	var idx int
	w.waitFor("a leader of "+name, time.Minute, func() bool {
		info, err := w.streamInfo(name)
		if err != nil || info.Cluster == nil {
			return false
		}
		idx = w.cluster.Index(info.Cluster.Leader)
		return idx >= 0
	})
	return idx
}

// current reports whether server i holds a current copy of stream name
// (it leads it, or is a current replica without lag).
func (w *world) current(name string, i int) bool {
	info, err := w.streamInfo(name)
	if err != nil || info.Cluster == nil {
		return false
	}
	if info.Cluster.Leader == w.cluster.Name(i) {
		return true
	}
	for _, p := range info.Cluster.Replicas {
		if p.Name == w.cluster.Name(i) {
			return p.Current && p.Lag == 0
		}
	}
	return false
}

// moveLeader asks stream name's leader to step down in favour of server
// i, until i leads it.
func (w *world) moveLeader(name string, i int) {
	w.t.Helper()
	body, _ := json.Marshal(map[string]any{"placement": map[string]any{"preferred": w.cluster.Name(i)}})
	w.waitFor(fmt.Sprintf("%s to lead %s", w.cluster.Name(i), name), 2*time.Minute, func() bool {
		if info, err := w.streamInfo(name); err == nil && info.Cluster != nil && info.Cluster.Leader == w.cluster.Name(i) {
			return true
		}
		ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second)
		defer cancel()
		_, _ = w.admin.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+name, body)
		return false
	})
}

// deploy creates the Deployment (generation 1) or changes its image so
// that its generation becomes gen.
func (w *world) deploy(gen int64) {
	w.t.Helper()
	if gen == 1 {
		dep := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: depName, Namespace: w.ns},
			Spec: fleetv1.DeploymentSpec{
				TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"role": "chaos"}},
				Score: score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{
					Name: "api", Image: image(1)}}}},
			}}
		if err := w.c.Create(w.ctx, dep); err != nil {
			w.t.Fatal(err)
		}
		return
	}
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		var d fleetv1.Deployment
		if err := w.c.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: depName}, &d); err != nil {
			return err
		}
		if d.Generation != gen-1 {
			return fmt.Errorf("the Deployment is at generation %d, want %d before the change", d.Generation, gen-1)
		}
		d.Spec.Score.Data.Services[0].Image = image(gen)
		return w.c.Update(w.ctx, &d)
	})
	if err != nil {
		w.t.Fatal(err)
	}
}

// deployment is the Deployment (nil when it cannot be read).
func (w *world) deployment() *fleetv1.Deployment {
	var d fleetv1.Deployment
	if err := w.c.Get(w.ctx, types.NamespacedName{Namespace: w.ns, Name: depName}, &d); err != nil {
		return nil
	}
	return &d
}

// succeeded reports whether generation gen's rollout succeeded with every
// device converged.
func (w *world) succeeded(gen int64) bool {
	d := w.deployment()
	if d == nil {
		return false
	}
	s := d.Status
	c := meta.FindStatusCondition(s.Conditions, fleetv1.ConditionReady)
	return s.ObservedGeneration == gen && s.Phase == fleetv1.PhaseSucceeded && c != nil && c.Status == metav1.ConditionTrue &&
		int(s.Counts.Succeeded) == len(w.devices) && int(s.Counts.Total) == len(w.devices)
}

// statusLine is the Deployment's status, short.
func (w *world) statusLine() string {
	d := w.deployment()
	if d == nil {
		return "no Deployment"
	}
	s := d.Status
	return fmt.Sprintf("generation %d, observed %d, phase %s, counts %+v", d.Generation, s.ObservedGeneration, s.Phase, s.Counts)
}

// waitSucceeded waits until generation gen's rollout succeeded and returns
// when it saw it.
func (w *world) waitSucceeded(gen int64, timeout time.Duration) time.Time {
	w.t.Helper()
	if err := testenv.Poll(w.ctx, timeout, func() bool { return w.succeeded(gen) }); err != nil {
		if dump := os.Getenv("CHAOS_GOROUTINES"); dump != "" {
			if f, ferr := os.Create(dump); ferr == nil {
				_ = pprof.Lookup("goroutine").WriteTo(f, 2)
				_ = f.Close()
			}
		}
		// Where the operator's and the client's goroutines stand: a
		// rollout that stopped moving shows what it waits on.
		w.t.Logf("goroutines of the operator and the JetStream client:\n%s", stacksOf(60_000, "harmony-fleet/operator", "nats.go/jetstream"))
		w.t.Fatalf("%v waiting for generation %d to succeed on %d devices; status: %s; stored reports: %s", err, gen, len(w.devices),
			w.statusLine(), w.reportsOf(gen))
	}
	return time.Now()
}

// reportsOf says which devices have a Converged report of generation gen
// in the reports stream (a failure's diagnosis: lost reports, or a runner
// that did not read them).
func (w *world) reportsOf(gen int64) string {
	ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
	defer cancel()
	converged := map[string]bool{}
	n := 0
	for r, err := range w.st.Replay(ctx, "fleet.report.*.workload", events.FromStart()) {
		if err != nil {
			return fmt.Sprintf("unreadable (%v)", err)
		}
		d, err := events.Decode[events.WorkloadStatus](r.Event)
		if err != nil || d.Namespace != w.ns || d.Generation != gen {
			continue
		}
		n++
		if d.Phase == events.WorkloadConverged {
			converged[r.Event.Keys.Device] = true
		}
	}
	return fmt.Sprintf("%d reports of generation %d, %d of %d devices Converged", n, gen, len(converged), len(w.devices))
}

// transitionsOnce checks that every rollout transition of the Deployment
// is appended once per generation, and that each generation in gens has
// its rollout.started and rollout.succeeded.
func (w *world) transitionsOnce(t *testing.T, gens []int64) {
	subj, err := events.DeploymentRolloutSubject(w.ns, depName)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]map[events.Type]int{}
	for r, err := range w.st.Replay(w.ctx, subj, events.FromStart()) {
		if err != nil {
			t.Fatal(err)
		}
		g := r.Event.Correlation.Generation
		if seen[g] == nil {
			seen[g] = map[events.Type]int{}
		}
		seen[g][r.Event.Type]++
	}
	for g, types := range seen {
		for typ, n := range types {
			if n != 1 && typ != events.TypeRolloutTargetRemoved {
				t.Errorf("generation %d: %s appended %d times", g, typ, n)
			}
		}
	}
	for _, g := range gens {
		if seen[g][events.TypeRolloutStarted] != 1 || seen[g][events.TypeRolloutSucceeded] != 1 {
			t.Errorf("generation %d: transitions %v, want one rollout.started and one rollout.succeeded", g, seen[g])
		}
	}
}

// rebuildEqualsLive folds the streams the rollout runner reads from their
// first event into fresh projections and compares them with the live
// state: every fleet-intent value, and the Deployment status's revision,
// phase and counts.
func (w *world) rebuildEqualsLive(t *testing.T) {
	intent, rollouts := projections.NewIntent(), map[events.Keys]projections.Rollout{}
	for _, filter := range []string{"fleet.intent.*.*.*", "fleet.rollout.deployment.*.*", "fleet.report.*.workload"} {
		for r, err := range w.st.Replay(w.ctx, filter, events.FromStart()) {
			if err != nil {
				t.Fatal(err)
			}
			k := r.Event.Keys
			if r.Event.Type == events.TypeWorkloadStatus {
				d, err := events.Decode[events.WorkloadStatus](r.Event)
				if err != nil {
					continue // hostile or foreign data: the runner skips it too
				}
				k = events.Keys{Namespace: d.Namespace, Name: d.Deployment}
			} else {
				intent.Apply(r.Event)
			}
			rollouts[k] = rollouts[k].Apply(r.Event)
		}
	}
	for _, dev := range w.devices {
		want, _ := intent.Value(dev)
		ctx, cancel := context.WithTimeout(w.ctx, 5*time.Second)
		e, err := w.kv.Get(ctx, dev)
		cancel()
		if err != nil {
			t.Errorf("fleet-intent %s: %v", dev, err)
			continue
		}
		if string(e.Value()) != string(want) {
			t.Errorf("fleet-intent %s: live %s, rebuilt %s", dev, e.Value(), want)
		}
	}
	rebuilt, ok := rollouts[events.Keys{Namespace: w.ns, Name: depName}].Status()
	if !ok {
		t.Fatal("the rebuild has no status")
	}
	live := w.deployment().Status
	if rebuilt.Phase != live.Phase || rebuilt.Counts != live.Counts || rebuilt.Revision == nil || live.Revision == nil ||
		*rebuilt.Revision != *live.Revision {
		t.Errorf("status: rebuilt %s %+v %+v, live %s %+v %+v", rebuilt.Phase, rebuilt.Counts, rebuilt.Revision, live.Phase, live.Counts, live.Revision)
	}
}

// adminURL is every server's URL with the admin user's credentials: what
// an operator process gets in its environment (NATS_URL), never on its
// command line.
func (w *world) adminURL() string {
	var urls []string
	for _, u := range w.cluster.ClientURLs() {
		p, err := url.Parse(u)
		if err != nil {
			w.t.Fatal(err)
		}
		p.User = url.UserPassword(adminUser, w.adminPass)
		urls = append(urls, p.String())
	}
	return strings.Join(urls, ",")
}

// stacksOf returns the stacks of this process's goroutines that mention
// one of marks, at most limit bytes of them.
func stacksOf(limit int, marks ...string) string {
	var all bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&all, 2)
	var b strings.Builder
	for g := range strings.SplitSeq(all.String(), "\n\n") {
		if !slices.ContainsFunc(marks, func(m string) bool { return strings.Contains(g, m) }) {
			continue
		}
		if b.Len()+len(g) > limit {
			b.WriteString("… (more goroutines left out)\n")
			break
		}
		b.WriteString(g)
		b.WriteString("\n\n")
	}
	return b.String()
}

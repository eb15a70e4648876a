package dashboardui

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/controlplane"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/dashboard"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../../../k8s/config/crd"},
		ManifestDirs: []string{"../../../k8s/config/admission", "../../../k8s/config/rbac"}})
}

// The users the development provider signs in: admin has the fleet-admin
// role, viewer none. The passwords are the tests' own.
const (
	adminUser      = "operator-ada"
	adminPassword  = "ada-browser-test-5b1d"
	viewerUser     = "viewer-bob"
	viewerPassword = "bob-browser-test-c07e"
	clientID       = "fleet-dashboard"
	clientSecret   = "dashboard-browser-test-secret-41f9"
)

// The images the simulated registry serves (to every device, without a
// credential).
const (
	imageV1     = "registry.example/fleet/web:v1"
	imageV2     = "registry.example/fleet/web:v2"
	imageBroken = "registry.example/fleet/missing:v1" // not in the registry: every pull fails
)

var registry = map[string]sim.RegistryImage{imageV1: {}, imageV2: {}}

// The agents heartbeat every second and the operator marks a device Stale
// after five without one: a device cut off shows on its page in seconds.
const (
	heartbeat  = time.Second
	staleAfter = 5 * time.Second
)

// devices run on the simulated runtime; every one is role=analyzer, the
// first a canary.
var devices = []string{"edge-1", "edge-2", "edge-3"}

// fleet is a whole Fleet on this machine: the control plane (embedded
// JetStream with the auth callout and the development OpenID Provider), a
// real kube-apiserver, the operator, an agent per device on the simulated
// runtime, connected with its machine key through the callout, and the
// dashboard (dashboard.RunFleet) signing users in through the provider.
// The operator and the dashboard restart together (restart).
type fleet struct {
	t      *testing.T
	plane  *controlplane.Plane
	kube   client.Client
	ns     string
	key    []byte
	logs   *testenv.SyncBuffer
	log    *slog.Logger
	agents map[string]context.CancelFunc
	// The operator and the dashboard: stop them with stopControl.
	stopOp, stopDash func()
	// listeners for the dashboard, one per start: each start serves on
	// the next (the provider knows every redirect URI).
	listeners []net.Listener
	starts    int
	// URL is the dashboard's base URL of the current start.
	URL string
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	srv := kubeapi.Shared(t)
	f := &fleet{t: t, logs: &testenv.SyncBuffer{}, agents: map[string]context.CancelFunc{},
		ns: fmt.Sprintf("ui-%d", time.Now().UnixNano()%1e6)}
	f.log = slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the fleet's logs (tail):\n%s", tail(f.logs.String(), 12000))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var err error
	f.plane, err = controlplane.Start(ctx, controlplane.Options{StoreDir: t.TempDir(), Port: -1, Sync: natsembed.FastSync, Logger: f.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.plane.Close() })
	scheme := runtime.NewScheme()
	if err := fleetv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if f.kube, err = client.New(srv.RESTConfig(), client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if err := f.kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}); err != nil {
		t.Fatal(err)
	}
	f.startOperator()
	for i, d := range devices {
		f.startDevice(ctx, d, i == 0)
	}
	p := f.plane.Provider()
	if _, err := p.CreateHumanUser(ctx, adminUser, adminPassword, dashboard.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CreateHumanUser(ctx, viewerUser, viewerPassword); err != nil {
		t.Fatal(err)
	}
	var redirects, logouts []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		f.listeners = append(f.listeners, ln)
		redirects = append(redirects, "http://"+ln.Addr().String()+"/callback")
		logouts = append(logouts, "http://"+ln.Addr().String()+"/signed-out")
	}
	if err := p.RegisterWebClient(devop.WebClient{ID: clientID, Secret: clientSecret, RedirectURIs: redirects, PostLogoutRedirectURIs: logouts}); err != nil {
		t.Fatal(err)
	}
	f.key = make([]byte, dashboard.SessionKeySize)
	if _, err := rand.Read(f.key); err != nil {
		t.Fatal(err)
	}
	f.startDashboard()
	t.Cleanup(f.stopControl)
	return f
}

// run runs fn in the plane's group until stop is called; stop waits for it.
func (f *fleet) run(name string, fn func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(f.plane.Context())
	done := make(chan struct{})
	f.plane.Go(name, func(context.Context) error {
		defer close(done)
		err := fn(ctx)
		if ctx.Err() != nil {
			return nil
		}
		return err
	})
	return func() {
		cancel()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			f.t.Errorf("%s did not stop within 2 minutes", name)
		}
	}
}

func (f *fleet) startOperator() {
	p := f.plane
	cfg := kubeapi.Shared(f.t).RESTConfig()
	f.stopOp = f.run("operator", func(ctx context.Context) error {
		return operator.Run(ctx, operator.Options{RESTConfig: cfg, Store: p.Store(), Reader: p.Store(), IntentKV: p.Intent(), Devices: p.Store(),
			StaleAfter: staleAfter, Logger: f.log.With("component", "operator"), SeveralPerProcess: true})
	})
}

// startDashboard serves the dashboard on the next listener and waits until
// its cache synced.
func (f *fleet) startDashboard() {
	f.t.Helper()
	ln := f.listeners[f.starts]
	f.starts++
	f.URL = "http://" + ln.Addr().String()
	ready := make(chan struct{})
	cfg := kubeapi.Shared(f.t).RESTConfig()
	url := f.URL
	f.stopDash = f.run("dashboard", func(ctx context.Context) error {
		return dashboard.RunFleet(ctx, dashboard.FleetOptions{
			Server: dashboard.Options{Logger: f.log.With("component", "dashboard"), PublicURL: url, SessionKey: f.key,
				OIDC: &dashboard.OIDC{Issuer: f.plane.Provider().Issuer(), ClientID: clientID, ClientSecret: clientSecret},
				// Rollout requests as "oidc:<user>" with the group fleet-admin.
				Kube: dashboard.KubeIdentity{UsernameClaim: "preferred_username", UsernamePrefix: "oidc:"}},
			RESTConfig: cfg, Store: f.plane.Store(), Namespace: f.ns,
			Ready: func(*dashboard.Server) { close(ready) }}, ln)
	})
	select {
	case <-ready:
	case <-f.plane.Done():
		f.t.Fatalf("the fleet stopped before the dashboard was ready: %v", f.plane.Err())
	case <-time.After(2 * time.Minute):
		f.t.Fatal("the dashboard's cache did not sync within 2 minutes")
	}
}

// stopControl stops the dashboard, then the operator (idempotent).
func (f *fleet) stopControl() {
	if f.stopDash != nil {
		f.stopDash()
		f.stopDash = nil
	}
	if f.stopOp != nil {
		f.stopOp()
		f.stopOp = nil
	}
}

// restart stops the operator and the dashboard and starts them again (the
// dashboard at its next address); the NATS store, the API server and the
// devices stay.
func (f *fleet) restart() {
	f.t.Helper()
	f.stopControl()
	f.startOperator()
	f.startDashboard()
}

// startDevice enrolls device d at the provider, creates its Device
// resource and runs its agent, which connects through the auth callout
// with its machine key.
func (f *fleet) startDevice(ctx context.Context, d string, canary bool) {
	t, p := f.t, f.plane
	path := filepath.Join(t.TempDir(), d+".json")
	subject, err := p.EnrollDevice(ctx, d, path)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"role": "analyzer", "site": "lab"}
	if canary {
		labels["canary"] = "true"
	}
	dev := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: d, Namespace: f.ns, Labels: labels},
		Spec: fleetv1.DeviceSpec{IdentitySubject: subject}}
	if err := f.kube.Create(ctx, dev); err != nil {
		t.Fatal(err)
	}
	kf, err := credential.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	log := f.log.With("device", d)
	f.agents[d] = f.run("agent "+d, func(ctx context.Context) error {
		// A quarantined device's reconnections are refused: into the
		// fleet's log, not nats.go's default printing to stderr.
		quiet := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { log.Info("nats", "err", err) })
		dc, err := agent.Connect(ctx, agent.ConnectOptions{URL: p.URL(), Key: &kf, Device: d, Issuer: kf.Issuer, Audience: kf.Audience, Logger: log,
			NATSOptions: []nats.Option{quiet}})
		if err != nil {
			return err
		}
		defer dc.Close()
		return agent.Run(ctx, agent.Options{Device: d, Conn: dc.Conn, Labels: labels, AgentVersion: "browser-test", Logger: log,
			HeartbeatInterval: heartbeat,
			Reconciler:        &agent.Reconciler{Device: d, Runtime: sim.New(sim.Options{Registry: registry}), Log: log}})
	})
}

// apply creates or updates the object of a YAML manifest in the test's
// namespace (server-side apply, as kubectl apply --server-side does).
func (f *fleet) apply(manifest string) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var obj unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(manifest), &obj.Object); err != nil {
		f.t.Fatalf("manifest: %v\n%s", err, manifest)
	}
	obj.SetNamespace(f.ns)
	if err := f.kube.Apply(ctx, client.ApplyConfigurationFromUnstructured(&obj), client.FieldOwner("browser-test"), client.ForceOwnership); err != nil {
		f.t.Fatalf("apply %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
}

// deployment is a Deployment of one service running image on every
// analyzer (all three devices). An image the simulated registry does not
// serve fails every device's preflight: the rollout fails.
func deployment(name, image string) string { return deploymentWith(name, image, "") }

// deploymentWith is deployment with a rollout block (YAML lines indented
// by two spaces under spec, "" for none).
func deploymentWith(name, image, rollout string) string {
	return fmt.Sprintf(`apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata:
  name: %s
spec:
  targetSelector:
    matchLabels:
      role: analyzer
%s  score:
    type: PodmanV0
    data:
      services:
        - name: %s
          image: %s
          ports: []
          env: []
          secret_env: []
          volumes: []
          restart_policy: unless-stopped
`, name, rollout, name, image)
}

// taskRun is a TaskRun of a system upgrade on every analyzer.
func taskRun(name string) string {
	return fmt.Sprintf(`apiVersion: fleet.nationtech.io/v1alpha1
kind: TaskRun
metadata:
  name: %s
spec:
  task: system-upgrade
  targetSelector:
    matchLabels:
      role: analyzer
`, name)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "…\n" + s
}

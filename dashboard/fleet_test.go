package dashboard_test

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/controlplane"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/dashboard"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/score"
)

func TestMain(m *testing.M) {
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../k8s/config/crd"}, ManifestDirs: []string{"../k8s/config/admission", "../k8s/config/rbac"}})
}

// A device heartbeats five times within the operator's stale-after, so a
// running agent stays online and a stopped one goes stale within seconds.
const (
	heartbeat  = time.Second
	staleAfter = 5 * time.Second
)

// webImage is the image of the test's Deployment, present on every
// simulated device.
const webImage = "registry.example.com/web:v1"

const (
	adaPassword  = "ada-correct-horse-7f1e"
	bobPassword  = "bob-battery-staple-92ab"
	veraPassword = "vera-viewer-staple-31cd"
	clientID     = "fleet-dashboard"
	clientSecret = "dashboard-client-secret-5d2c8e"
)

// fleet is a one-machine Fleet: the control plane (NATS with the callout
// and the development provider), a kube-apiserver, the operator, two
// agents on the simulated runtime, and the dashboard, whose logs and the
// plane's are kept to be searched for secrets.
type fleet struct {
	t         *testing.T
	plane     *controlplane.Plane
	kube      client.Client
	ns        string
	key       []byte
	logs      *testenv.SyncBuffer
	stopAgent map[string]context.CancelFunc
	dash      context.CancelFunc
	dashDone  chan error
	listeners []net.Listener
	base      string
	// saTokens are the dashboard's service account tokens (secrets).
	saTokens []string
}

func startFleet(t *testing.T) *fleet {
	t.Helper()
	srv := kubeapi.Shared(t)
	f := &fleet{t: t, logs: &testenv.SyncBuffer{}, stopAgent: map[string]context.CancelFunc{}, ns: "dash-" + strings.ToLower(fmt.Sprint(time.Now().UnixNano()%1e6))}
	log := slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	f.plane, err = controlplane.Start(ctx, controlplane.Options{StoreDir: t.TempDir(), Port: -1, Sync: natsembed.FastSync, Logger: log})
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
	cfg := srv.RESTConfig()
	if f.kube, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	if err := f.kube.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ns}}); err != nil {
		t.Fatal(err)
	}
	p := f.plane
	p.Go("operator", func(ctx context.Context) error {
		return operator.Run(ctx, operator.Options{RESTConfig: cfg, Store: p.Store(), Reader: p.Store(), IntentKV: p.Intent(), Devices: p.Store(),
			StaleAfter: staleAfter, Logger: log.With("component", "operator"), SeveralPerProcess: true})
	})
	for _, d := range []string{"d1", "d2"} {
		f.startDevice(ctx, d, log)
	}
	// Users: ada has the fleet-admin role, vera fleet-viewer, bob none.
	if _, err := p.Provider().CreateHumanUser(ctx, "ada", adaPassword, dashboard.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Provider().CreateHumanUser(ctx, "vera", veraPassword, dashboard.RoleViewer); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Provider().CreateHumanUser(ctx, "bob", bobPassword); err != nil {
		t.Fatal(err)
	}
	// Two listeners, so the dashboard can restart at another address
	// with the same registered client.
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
	if err := p.Provider().RegisterWebClient(devop.WebClient{ID: clientID, Secret: clientSecret, RedirectURIs: redirects, PostLogoutRedirectURIs: logouts}); err != nil {
		t.Fatal(err)
	}
	// The dashboard runs as the service account docs/dashboard.md gives
	// RBAC to.
	if out, err := srv.Kubectl(ctx, dashboardRBAC(t, f.ns), "apply", "-f", "-"); err != nil {
		t.Fatalf("apply the documented RBAC: %v: %s", err, out)
	}
	f.key = key(t)
	f.startDashboard(0, log)
	t.Cleanup(f.stopDashboard)
	return f
}

// startDevice enrolls device d, creates its Device resource and runs its
// agent on the simulated runtime.
func (f *fleet) startDevice(ctx context.Context, d string, log *slog.Logger) {
	t, p := f.t, f.plane
	path := filepath.Join(t.TempDir(), d+".json")
	subject, err := p.EnrollDevice(ctx, d, path)
	if err != nil {
		t.Fatal(err)
	}
	dev := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: d, Namespace: f.ns, Labels: map[string]string{"site": "lab"}},
		Spec: fleetv1.DeviceSpec{IdentitySubject: subject}}
	if err := f.kube.Create(ctx, dev); err != nil {
		t.Fatal(err)
	}
	kf, err := credential.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(p.Context())
	f.stopAgent[d] = stop
	p.Go("agent "+d, func(context.Context) error {
		dc, err := agent.Connect(actx, agent.ConnectOptions{URL: p.URL(), Key: &kf, Device: d, Issuer: kf.Issuer, Audience: kf.Audience,
			Logger: log.With("device", d)})
		if err != nil {
			if actx.Err() != nil {
				return nil
			}
			return err
		}
		defer dc.Close()
		err = agent.Run(actx, agent.Options{Device: d, Conn: dc.Conn, AgentVersion: "test", Logger: log.With("device", d), HeartbeatInterval: heartbeat,
			Reconciler: &agent.Reconciler{Device: d, Runtime: sim.New(sim.Options{LocalImages: []string{webImage}}), Log: log.With("device", d)}})
		if actx.Err() != nil {
			return nil
		}
		return err
	})
}

// startDashboard serves the dashboard on listener i.
func (f *fleet) startDashboard(i int, log *slog.Logger) {
	f.t.Helper()
	ln := f.listeners[i]
	f.base = "http://" + ln.Addr().String()
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	f.dash, f.dashDone = cancel, make(chan error, 1)
	go func() {
		f.dashDone <- dashboard.RunFleet(ctx, dashboard.FleetOptions{
			Server: dashboard.Options{Logger: log.With("component", "dashboard"), PublicURL: f.base, SessionKey: f.key,
				OIDC: &dashboard.OIDC{Issuer: f.plane.Provider().Issuer(), ClientID: clientID, ClientSecret: clientSecret},
				// As an API server with --oidc-username-claim=preferred_username
				// --oidc-username-prefix=oidc: would name the users.
				Kube: dashboard.KubeIdentity{UsernameClaim: "preferred_username", UsernamePrefix: "oidc:"}},
			RESTConfig: f.asDashboard(), Store: f.plane.Store(), Namespace: f.ns,
			Ready: func(*dashboard.Server) { close(ready) }}, ln)
	}()
	select {
	case <-ready:
	case err := <-f.dashDone:
		f.t.Fatalf("the dashboard stopped before it was ready: %v", err)
	case <-time.After(2 * time.Minute):
		f.t.Fatal("the dashboard's cache did not sync within 2 minutes")
	}
}

func (f *fleet) stopDashboard() {
	if f.dash == nil {
		return
	}
	f.dash()
	if err := <-f.dashDone; err != nil {
		f.t.Errorf("the dashboard: %v", err)
	}
	f.dash = nil
}

var (
	hiddenField = regexp.MustCompile(`name="authRequestID" value="([^"]+)"`)
	formAction  = regexp.MustCompile(`<form method="post" action="([^"]+)"`)
)

// signIn follows the real sign-in: the dashboard sends the browser to the
// provider, whose login form takes the user name and password; the
// provider sends it back to /callback. It returns the final page.
func signIn(t *testing.T, b *browser, base, user, password string) (int, string) {
	t.Helper()
	status, final, body := b.get(base + "/devices")
	id := hiddenField.FindStringSubmatch(body)
	action := formAction.FindStringSubmatch(body)
	if status != http.StatusOK || id == nil || action == nil {
		t.Fatalf("the provider's login form: %d at %s\n%s", status, final, body)
	}
	at, err := url.Parse(final)
	if err != nil {
		t.Fatal(err)
	}
	target, err := at.Parse(action[1])
	if err != nil {
		t.Fatal(err)
	}
	status, _, body = b.post(target.String(), url.Values{"authRequestID": {id[1]}, "username": {user}, "password": {password}}, "")
	return status, body
}

// callbackLocation follows the real sign-in from base+start (the
// dashboard, then the provider's login form, then /callback) in a fresh
// browser and returns the Location /callback answers with, read off the
// wire before anything follows it.
func callbackLocation(t *testing.T, base, start, user, password string) string {
	t.Helper()
	var loc string
	seen := false
	b := newBrowser(t, base)
	b.c.Transport = roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err == nil && req.URL.Scheme+"://"+req.URL.Host == base && req.URL.Path == "/callback" {
			loc, seen = resp.Header.Get("Location"), true
		}
		return resp, err
	})
	b.c.CheckRedirect = func(_ *http.Request, via []*http.Request) error {
		if via[len(via)-1].URL.Path == "/callback" {
			return http.ErrUseLastResponse
		}
		return nil
	}
	status, final, body := b.get(base + start)
	id := hiddenField.FindStringSubmatch(body)
	action := formAction.FindStringSubmatch(body)
	if status != http.StatusOK || id == nil || action == nil {
		t.Fatalf("the provider's login form: %d at %s\n%s", status, final, body)
	}
	at, err := url.Parse(final)
	if err != nil {
		t.Fatal(err)
	}
	target, err := at.Parse(action[1])
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.c.PostForm(target.String(), url.Values{"authRequestID": {id[1]}, "username": {user}, "password": {password}})
	if err == nil {
		resp.Body.Close()
	}
	if !seen {
		t.Fatalf("the sign-in never reached /callback (%v)", err)
	}
	return loc
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestTheDashboardOfAFleet(t *testing.T) {
	f := startFleet(t)
	ctx := context.Background()
	ada := newBrowser(t, f.base)

	t.Run("a fleet-admin signs in through the provider's login form", func(t *testing.T) {
		status, body := signIn(t, ada, f.base, "ada", adaPassword)
		if status != http.StatusOK || !strings.Contains(body, "Signed in as <strong>ada</strong>") || !strings.Contains(body, "<h1>Devices</h1>") {
			t.Fatalf("after sign-in: %d\n%s", status, body)
		}
		testenv.Eventually(t, "both devices listed", time.Minute, func() bool {
			_, _, body := ada.get(f.base + "/devices")
			return strings.Contains(body, `href="/devices/d1"`) && strings.Contains(body, `href="/devices/d2"`)
		})
	})

	t.Run("a user with neither fleet role gets 403 naming both", func(t *testing.T) {
		bob := newBrowser(t, f.base)
		status, body := signIn(t, bob, f.base, "bob", bobPassword)
		if status != http.StatusForbidden || !strings.Contains(body, "<code>fleet-admin</code> role (to see and act) or the <code>fleet-viewer</code> role") {
			t.Fatalf("bob: %d\n%s", status, body)
		}
	})

	t.Run("sign-in sends the browser back only to the dashboard", func(t *testing.T) {
		tests := []struct{ name, query, want string }{
			{"a TAB between the two slashes leads to the overview", "return=/%09/evil.example/x", "/"},
			{"escaped slashes lead to the overview", "return=/%252F%252Fevil.example/x", "/"},
			{"a backslash after the slash leads to the overview", "return=/%5Cevil.example/x", "/"},
			{"a dashboard path with a query and a fragment is kept", "return=" + url.QueryEscape("/deployments/lab/x?tab=plan#events"), "/deployments/lab/x?tab=plan#events"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				if got := callbackLocation(t, f.base, "/login?"+tc.query, "ada", adaPassword); got != tc.want {
					t.Errorf("GET /login?%s, sign-in at the provider: /callback answers Location %q, want %q", tc.query, got, tc.want)
				}
			})
		}
	})

	devicePage := func() string {
		status, _, body := ada.get(f.base + "/devices/d1")
		if status != http.StatusOK {
			t.Fatalf("the device page: %d\n%s", status, body)
		}
		return body
	}
	labelled := func() bool {
		var d fleetv1.Device
		if err := f.kube.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "d1"}, &d); err != nil {
			t.Fatal(err)
		}
		_, ok := d.Labels[fleetv1.LabelBlacklist]
		return ok
	}
	audit := func() []events.DashboardDeviceAction {
		subj, _ := events.DashboardDeviceSubject("d1")
		var out []events.DashboardDeviceAction
		for rec, err := range f.plane.Store().Replay(ctx, subj, events.FromStart()) {
			if err != nil {
				t.Fatal(err)
			}
			a, err := events.Decode[events.DashboardDeviceAction](rec.Event)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, a)
		}
		return out
	}

	t.Run("a quarantine without the right CSRF token is refused and changes nothing", func(t *testing.T) {
		token := csrf(t, devicePage())
		for _, form := range []url.Values{{}, {"csrf": {token[:len(token)-2] + "xx"}}} {
			status, _, body := ada.post(f.base+"/devices/d1/quarantine", form, f.base)
			if status != http.StatusForbidden {
				t.Errorf("status %d, want 403\n%s", status, body)
			}
		}
		if labelled() || len(audit()) != 0 {
			t.Errorf("after refused requests: labelled %v, audit %v", labelled(), audit())
		}
	})

	t.Run("quarantine sets the label, records ada, and the callout refuses and disconnects the device", func(t *testing.T) {
		status, final, body := ada.post(f.base+"/devices/d1/quarantine", url.Values{"csrf": {csrf(t, devicePage())}}, f.base)
		if status != http.StatusOK || !strings.Contains(final, "done=quarantined") {
			t.Fatalf("quarantine: %d at %s\n%s", status, final, body)
		}
		var d fleetv1.Device
		if err := f.kube.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "d1"}, &d); err != nil {
			t.Fatal(err)
		}
		if _, ok := d.Labels[fleetv1.LabelBlacklist]; !ok || d.Annotations[dashboard.AnnotationUser] != "ada" || d.Annotations[dashboard.AnnotationAction] != "quarantine" {
			t.Errorf("Device labels %v annotations %v", d.Labels, d.Annotations)
		}
		managed := false
		for _, m := range d.ManagedFields {
			managed = managed || m.Manager == dashboard.FieldManager
		}
		if !managed {
			t.Errorf("no managed fields of %s: %v", dashboard.FieldManager, d.ManagedFields)
		}
		a := audit()
		if len(a) != 1 || a[0].Action != events.ActionQuarantine || a[0].User != "ada" || a[0].UserSubject == "" || a[0].Namespace != f.ns {
			t.Errorf("audit events %+v", a)
		}
		testenv.Eventually(t, "the device page saying the callout refuses d1", time.Minute, func() bool {
			return strings.Contains(devicePage(), "the auth callout refuses this device")
		})
		// Disconnected: its heartbeats stop, the operator marks it stale.
		testenv.Eventually(t, "the device page showing d1 stale", time.Minute, func() bool {
			return strings.Contains(devicePage(), `<span class="live live-stale">stale</span>`)
		})
	})

	t.Run("release removes the label, records ada, and the device comes back", func(t *testing.T) {
		status, final, body := ada.post(f.base+"/devices/d1/release", url.Values{"csrf": {csrf(t, devicePage())}}, f.base)
		if status != http.StatusOK || !strings.Contains(final, "done=released") {
			t.Fatalf("release: %d at %s\n%s", status, final, body)
		}
		if labelled() {
			t.Error("the blacklist label is still there")
		}
		a := audit()
		if len(a) != 2 || a[1].Action != events.ActionRelease || a[1].User != "ada" {
			t.Errorf("audit events %+v", a)
		}
		testenv.Eventually(t, "the device page saying the callout admits d1", time.Minute, func() bool {
			return strings.Contains(devicePage(), "the auth callout admits its identity")
		})
		testenv.Eventually(t, "d1 reconnected and online again", 3*time.Minute, func() bool {
			return strings.Contains(devicePage(), `<span class="live live-online">online</span>`)
		})
	})

	t.Run("a command is published, recorded and its result shown, and the device page's live stream says it changed", func(t *testing.T) {
		changed := follow(t, ada, f.base+"/live?page=device&key=d2")
		body := devicePage()
		status, final, body := ada.post(f.base+"/devices/d2/command", url.Values{"csrf": {csrf(t, body)}, "command": {agent.CommandReportInventory}}, f.base)
		if status != http.StatusOK || !strings.Contains(final, "command=") {
			t.Fatalf("command: %d at %s\n%s", status, final, body)
		}
		u, _ := url.Parse(final)
		id := u.Query().Get("command")
		subj, _ := events.CommandSubject("d2")
		rec, err := f.plane.Store().Last(ctx, subj)
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := events.Decode[events.AgentCommand](rec.Event)
		if err != nil || rec.Event.ID.String() != id || cmd.Command != agent.CommandReportInventory || cmd.RequestedBy != "ada" {
			t.Errorf("the stored command %s: %+v (%v), want id %s from ada", rec.Event.ID, cmd, err, id)
		}
		testenv.Eventually(t, "the agent's answer on the device page", time.Minute, func() bool {
			_, _, body := ada.get(final)
			return strings.Contains(body, "Succeeded</span>: the agent answered “report-inventory”")
		})
		select {
		case <-changed:
		case <-time.After(time.Minute):
			t.Error("the live stream of d2's page sent no change within a minute of the command's answer")
		}
	})

	// A Deployment of both devices in two batches of one, each waiting for
	// approval.
	dep := &fleetv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: f.ns},
		Spec: fleetv1.DeploymentSpec{TargetSelector: fleetv1.TargetSelector{MatchLabels: map[string]string{"site": "lab"}},
			Rollout: fleetv1.RolloutSpec{Batches: []fleetv1.RolloutBatch{{Count: new(int32(1))}}, Approval: fleetv1.RolloutApprovalManual},
			Score:   score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "web", Image: webImage}}}}}}
	depPage := f.base + "/deployments/" + f.ns + "/web"
	rolloutAction := func() string {
		var d fleetv1.Deployment
		if err := f.kube.Get(ctx, client.ObjectKeyFromObject(dep), &d); err != nil {
			t.Fatal(err)
		}
		return d.Annotations[fleetv1.AnnotationRolloutAction]
	}
	transitions := func(typ events.Type) []events.RolloutTransition {
		subj, _ := events.DeploymentRolloutSubject(f.ns, "web")
		var out []events.RolloutTransition
		for rec, err := range f.plane.Store().Replay(ctx, subj, events.FromStart()) {
			if err != nil {
				t.Fatal(err)
			}
			if rec.Event.Type != typ {
				continue
			}
			tr, err := events.Decode[events.RolloutTransition](rec.Event)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, tr)
		}
		return out
	}

	t.Run("an admin approves a batch from the Deployment page and the API server and the operator record her", func(t *testing.T) {
		if err := f.kube.Create(ctx, dep); err != nil {
			t.Fatal(err)
		}
		var body string
		testenv.Eventually(t, "the Deployment page offering to approve batch 1", 2*time.Minute, func() bool {
			_, _, body = ada.get(depPage)
			return strings.Contains(body, `<button type="submit">Approve batch 1</button>`)
		})
		status, final, body := ada.post(depPage+"/rollout", url.Values{"csrf": {csrf(t, body)}, "action": {"approve"}, "batch": {"1"}}, f.base)
		if status != http.StatusOK || !strings.Contains(body, "Approval of batch 1 requested") {
			t.Fatalf("approve: %d at %s\n%s", status, final, body)
		}
		a, err := fleetv1.ParseRolloutAction(rolloutAction())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(fleetv1.RolloutAction{Action: fleetv1.RolloutActionApprove, Generation: 1, Batch: 1, By: "oidc:ada", Request: a.Request}, a); diff != "" {
			t.Errorf("the Deployment's rollout request (-want +got):\n%s", diff)
		}
		testenv.Eventually(t, "rollout.approved of batch 1 by oidc:ada on the rollout subject", 2*time.Minute, func() bool {
			got := transitions(events.TypeRolloutApproved)
			return len(got) == 1 && got[0].By == "oidc:ada" && got[0].Batch == 1 && got[0].Request == a.Request
		})
		testenv.Eventually(t, "the Deployment page naming oidc:ada as batch 1's approver", time.Minute, func() bool {
			_, _, body := ada.get(depPage)
			return strings.Contains(body, "<td>succeeded (approved by oidc:ada)</td>")
		})
	})

	vera := newBrowser(t, f.base)
	t.Run("a fleet-viewer sees every page and no action", func(t *testing.T) {
		if status, body := signIn(t, vera, f.base, "vera", veraPassword); status != http.StatusOK || !strings.Contains(body, "<h1>Devices</h1>") {
			t.Fatalf("vera's sign-in: %d\n%s", status, body)
		}
		actionForm := regexp.MustCompile(`<form[^>]*method="post"[^>]*action="(/[^"]*)"`)
		for _, p := range []string{"/", "/devices", "/devices/d1", "/deployments", "/deployments/" + f.ns + "/web", "/taskruns", "/alerts",
			"/fleet?at=" + url.QueryEscape(time.Now().UTC().Format(time.RFC3339))} {
			status, _, body := vera.get(f.base + p)
			if status != http.StatusOK {
				t.Errorf("GET %s: status %d\n%s", p, status, body)
				continue
			}
			for _, m := range actionForm.FindAllStringSubmatch(body, -1) {
				if m[1] != "/logout" {
					t.Errorf("GET %s offers the action %s to a fleet-viewer", p, m[1])
				}
			}
		}
		_, _, body := vera.get(depPage)
		if !strings.Contains(body, "Read-only: approving, pausing and resuming need the <code>fleet-admin</code> role.") {
			t.Errorf("the Deployment page does not say the viewer is read-only:\n%s", body)
		}
	})

	t.Run("a fleet-viewer's forged approval is refused by the API server and changes nothing", func(t *testing.T) {
		_, _, body := vera.get(depPage)
		before := rolloutAction()
		status, _, body := vera.post(depPage+"/rollout", url.Values{"csrf": {csrf(t, body)}, "action": {"approve"}, "batch": {"2"}}, f.base)
		// The API server's RBAC denial, naming the impersonated user.
		want := `User &#34;oidc:vera&#34; cannot patch resource &#34;deployments&#34; in API group &#34;fleet.nationtech.io&#34;`
		if status != http.StatusForbidden || !strings.Contains(body, "The Kubernetes API server refused this request") || !strings.Contains(body, want) {
			t.Errorf("vera's approval: status %d, want 403 with the API server's RBAC denial %q\n%s", status, want, body)
		}
		if after := rolloutAction(); after != before {
			t.Errorf("the rollout request changed from %s to %s", before, after)
		}
		for _, path := range []string{"/devices/d1/quarantine", "/devices/d1/command"} {
			status, _, body := vera.post(f.base+path, url.Values{"csrf": {csrf(t, body)}, "command": {agent.CommandReconcileNow}}, f.base)
			if status != http.StatusForbidden || !strings.Contains(body, "Actions need the fleet-admin role") {
				t.Errorf("POST %s as a fleet-viewer: %d, want 403 explaining the role\n%s", path, status, body)
			}
		}
		if labelled() {
			t.Error("vera's quarantine labelled d1")
		}
		if got := transitions(events.TypeRolloutApproved); len(got) != 1 {
			t.Errorf("approvals recorded: %+v, want only ada's", got)
		}
	})

	plan := func() fleetv1.PlanStatus {
		var d fleetv1.Deployment
		if err := f.kube.Get(ctx, client.ObjectKeyFromObject(dep), &d); err != nil {
			t.Fatal(err)
		}
		if d.Status.Plan == nil {
			return fleetv1.PlanStatus{}
		}
		return *d.Status.Plan
	}
	// rolloutRequest posts a pause or resume from the Deployment page as
	// the browser's user and returns the status and the page answered.
	rolloutRequest := func(b *browser, action string) (int, string) {
		_, _, body := b.get(depPage)
		status, _, body := b.post(depPage+"/rollout", url.Values{"csrf": {csrf(t, body)}, "action": {action}}, f.base)
		return status, body
	}
	// requested checks the Deployment's rollout request is the admin's
	// action for generation 1, recorded by the operator naming her.
	requested := func(t *testing.T, action fleetv1.RolloutActionKind, typ events.Type) {
		t.Helper()
		a, err := fleetv1.ParseRolloutAction(rolloutAction())
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(fleetv1.RolloutAction{Action: action, Generation: 1, By: "oidc:ada", Request: a.Request}, a); diff != "" {
			t.Errorf("the Deployment's rollout request (-want +got):\n%s", diff)
		}
		testenv.Eventually(t, string(typ)+" by oidc:ada on the rollout subject", 2*time.Minute, func() bool {
			got := transitions(typ)
			return len(got) == 1 && got[0].By == "oidc:ada" && got[0].Request == a.Request
		})
	}

	t.Run("an admin pauses the rollout from the Deployment page: the API server takes it as her and the operator records her", func(t *testing.T) {
		testenv.Eventually(t, "the Deployment page offering to pause", 2*time.Minute, func() bool {
			_, _, body := ada.get(depPage)
			return strings.Contains(body, `<button type="submit" class="danger">Pause the rollout</button>`)
		})
		if status, body := rolloutRequest(ada, "pause"); status != http.StatusOK || !strings.Contains(body, "Pause requested") {
			t.Fatalf("pause: %d\n%s", status, body)
		}
		requested(t, fleetv1.RolloutActionPause, events.TypeRolloutPaused)
		testenv.Eventually(t, "status.plan paused by oidc:ada", 2*time.Minute, func() bool {
			p := plan()
			return p.Paused && p.PausedBy == "oidc:ada"
		})
		testenv.Eventually(t, "the Deployment page saying it is paused by oidc:ada and offering to resume", time.Minute, func() bool {
			_, _, body := ada.get(depPage)
			return strings.Contains(body, "Paused by oidc:ada") && strings.Contains(body, `<button type="submit">Resume the rollout</button>`)
		})
	})

	t.Run("a fleet-viewer's forged pause and resume are refused by the API server and change nothing", func(t *testing.T) {
		before := rolloutAction()
		want := `User &#34;oidc:vera&#34; cannot patch resource &#34;deployments&#34; in API group &#34;fleet.nationtech.io&#34;`
		for _, action := range []string{"resume", "pause"} {
			status, body := rolloutRequest(vera, action)
			if status != http.StatusForbidden || !strings.Contains(body, "The Kubernetes API server refused this request") || !strings.Contains(body, want) {
				t.Errorf("vera's %s: status %d, want 403 with the API server's RBAC denial %q\n%s", action, status, want, body)
			}
		}
		if after := rolloutAction(); after != before {
			t.Errorf("the rollout request changed from %s to %s", before, after)
		}
		if p := plan(); !p.Paused || p.PausedBy != "oidc:ada" {
			t.Errorf("status.plan after vera's requests: paused %v by %q, want paused by oidc:ada", p.Paused, p.PausedBy)
		}
		if got := transitions(events.TypeRolloutResumed); len(got) != 0 {
			t.Errorf("resumes recorded: %+v, want none", got)
		}
	})

	t.Run("the admin resumes the rollout from the Deployment page and the operator records her", func(t *testing.T) {
		if status, body := rolloutRequest(ada, "resume"); status != http.StatusOK || !strings.Contains(body, "Resume requested") {
			t.Fatalf("resume: %d\n%s", status, body)
		}
		requested(t, fleetv1.RolloutActionResume, events.TypeRolloutResumed)
		testenv.Eventually(t, "status.plan no longer paused", 2*time.Minute, func() bool { return !plan().Paused })
		testenv.Eventually(t, "the Deployment page offering to pause again", time.Minute, func() bool {
			_, _, body := ada.get(depPage)
			return !strings.Contains(body, "Paused by") && strings.Contains(body, `<button type="submit" class="danger">Pause the rollout</button>`)
		})
	})

	t.Run("after the last batch the Deployment page says every batch succeeded, not which one started", func(t *testing.T) {
		var body string
		testenv.Eventually(t, "the Deployment page offering to approve batch 2", 2*time.Minute, func() bool {
			_, _, body = ada.get(depPage)
			return strings.Contains(body, `<button type="submit">Approve batch 2</button>`)
		})
		if !strings.Contains(body, "Batch <strong>2</strong> of 2 awaits approval") {
			t.Errorf("the plan does not say batch 2 awaits approval:\n%s", body)
		}
		status, _, body := ada.post(depPage+"/rollout", url.Values{"csrf": {csrf(t, body)}, "action": {"approve"}, "batch": {"2"}}, f.base)
		if status != http.StatusOK {
			t.Fatalf("approve batch 2: %d\n%s", status, body)
		}
		testenv.Eventually(t, "the Deployment page of the succeeded rollout", 2*time.Minute, func() bool {
			_, _, body = ada.get(depPage)
			return strings.Contains(body, "Every batch succeeded (2 of 2).")
		})
		// The timeline keeps the history (batch 2 awaits approval); the
		// plan and the controls say what is now.
		for _, stale := range []string{"started.", "awaits approval: <code>", "is rolling out", `value="pause"`, `value="approve"`} {
			if strings.Contains(body, stale) {
				t.Errorf("the page of the succeeded rollout says %q:\n%s", stale, body)
			}
		}
	})

	t.Run("an alert acknowledgement survives a dashboard restart", func(t *testing.T) {
		f.stopAgent["d2"]()
		var alertID string
		idField := regexp.MustCompile(`name="alert" value="([^"]+)"`)
		testenv.Eventually(t, "an alert for the stopped device d2", 2*time.Minute, func() bool {
			_, _, body := ada.get(f.base + "/alerts")
			m := idField.FindStringSubmatch(body)
			if m != nil && strings.Contains(body, "device d2 is") {
				alertID = m[1]
			}
			return alertID != ""
		})
		_, _, body := ada.get(f.base + "/alerts")
		status, _, body := ada.post(f.base+"/alerts/ack", url.Values{"csrf": {csrf(t, body)}, "alert": {htmlUnescape(alertID)}}, f.base)
		if status != http.StatusOK || !strings.Contains(body, "Acknowledged by ada") {
			t.Fatalf("ack: %d\n%s", status, body)
		}
		f.stopDashboard()
		f.startDashboard(1, slog.New(slog.NewTextHandler(f.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
		ada.origin = f.base
		testenv.Eventually(t, "the acknowledgement after the restart", time.Minute, func() bool {
			_, _, body := ada.get(f.base + "/alerts")
			return strings.Contains(body, "Acknowledged by ada")
		})
	})

	t.Run("the dashboard's service account may patch a Device but not delete one", func(t *testing.T) {
		c, err := client.New(f.asDashboard(), client.Options{Scheme: f.kube.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: "d2", Namespace: f.ns}}
		if err := c.Delete(ctx, d); !apierrors.IsForbidden(err) {
			t.Errorf("delete as the dashboard: %v, want forbidden (is the API server authorizing with RBAC?)", err)
		}
	})

	t.Run("no secret is in any log record", func(t *testing.T) {
		logs := f.logs.String()
		secrets := map[string]string{"ada's password": adaPassword, "bob's password": bobPassword, "the client secret": clientSecret,
			"the session key (hex)": hex.EncodeToString(f.key), "the session key (base64)": base64.StdEncoding.EncodeToString(f.key),
			"the session key (base64url)": base64.RawURLEncoding.EncodeToString(f.key), "the session key (raw)": string(f.key)}
		for i, tok := range f.saTokens {
			secrets[fmt.Sprintf("the dashboard's service account token %d", i)] = tok
		}
		for what, s := range secrets {
			if strings.Contains(logs, s) {
				t.Errorf("the logs contain %s", what)
			}
		}
		u, _ := url.Parse(f.base)
		for _, c := range ada.c.Jar.Cookies(u) {
			if strings.Contains(logs, c.Value) {
				t.Errorf("the logs contain the cookie %s", c.Name)
			}
		}
		if jwt := regexp.MustCompile(`eyJ[A-Za-z0-9_-]{10,}\.eyJ`).FindString(logs); jwt != "" {
			t.Errorf("the logs contain a JWT: %.40s…", jwt)
		}
		if strings.Contains(logs, "code=") {
			t.Error("the logs contain an authorization code parameter")
		}
	})
}

// htmlUnescape undoes html/template's escaping of an attribute value.
func htmlUnescape(s string) string {
	r := strings.NewReplacer("&#43;", "+", "&amp;", "&", "&#39;", "'", "&#34;", `"`, "&lt;", "<", "&gt;", ">")
	return r.Replace(s)
}

// follow opens a live-update stream and returns a channel closed at its
// first change event; the stream ends with the test.
func follow(t *testing.T, b *browser, u string) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("live stream %s: status %d", u, resp.StatusCode)
	}
	changed := make(chan struct{})
	go func() {
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if sc.Text() == "event: change" {
				close(changed)
				return
			}
		}
	}()
	return changed
}

// dashboardRBAC returns the service account, ClusterRole and binding
// docs/dashboard.md documents, in namespace ns.
func dashboardRBAC(t *testing.T, ns string) []byte {
	t.Helper()
	yaml := testenv.DocBlock(t, "docs/dashboard.md", "### RBAC for the dashboard", "yaml")
	return []byte(strings.ReplaceAll(yaml, "fleet-system", ns))
}

// asDashboard is the API server's configuration with a token of the
// dashboard's service account (a TokenRequest): its own credentials, so
// its impersonation of users is checked against its own RBAC.
func (f *fleet) asDashboard() *rest.Config {
	f.t.Helper()
	admin := kubeapi.Shared(f.t).RESTConfig()
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := cs.CoreV1().ServiceAccounts(f.ns).CreateToken(ctx, "fleet-dashboard", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		f.t.Fatalf("a token of the dashboard's service account: %v", err)
	}
	f.saTokens = append(f.saTokens, tr.Status.Token)
	return &rest.Config{Host: admin.Host, TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData}, BearerToken: tr.Status.Token}
}

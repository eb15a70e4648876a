package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/dashboard"
	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/poisontest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// TestTheDevicePageShowsHiddenCharactersOfDeviceInputEscaped: a Device
// whose status carries a right-to-left override (written by an operator of
// an earlier build, or anyone with status access) and heartbeats whose
// agent version carries every hidden character (poisontest.Hidden) are
// shown on the device page with visible escapes, never raw; so is the
// agent's answer to a command (the error, and the command it names, also
// bounded). The page is
// served from a live view of a real API server and JetStream.
func TestTheDevicePageShowsHiddenCharactersOfDeviceInputEscaped(t *testing.T) {
	srv := kubeapi.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
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
	ns := fmt.Sprintf("hidden-%d", time.Now().UnixNano()%1e6)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	id := ns + "-d1"
	d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: ns}, Spec: fleetv1.DeviceSpec{IdentitySubject: "sub-" + id}}
	if err := c.Create(ctx, d); err != nil {
		t.Fatal(err)
	}
	d.Status.Liveness = fleetv1.LivenessOnline
	d.Status.Inventory = &fleetv1.DeviceInventory{OS: "Debian\u2066 12", Arch: "arm64", Kernel: "6.1\u200b.0", AgentVersion: "v1.4\u202e2-exe"}
	// What it runs, as its container reports named it.
	d.Status.Workloads = []fleetv1.DeviceWorkload{{Namespace: ns, Deployment: "web\u202egnp.exe", Revision: "r\u200b1", Degraded: "Crash\u2066Loop"}}
	if err := c.Status().Update(ctx, d); err != nil {
		t.Fatal(err)
	}
	_, st := natstest.Provisioned(t)
	hb, err := events.New(events.Keys{Device: id}, events.DeviceHeartbeat{AgentVersion: poisontest.Hidden, Uptime: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The agent's answer to a command: its error carries every hidden
	// character, and the command it names has 32 KiB more (what fits in a report).
	cmdID := ulid.Make().String()
	hugeCommand := poisontest.Hidden + strings.Repeat("c", 32<<10)
	res, err := events.New(events.Keys{Device: id}, events.CommandResult{CommandID: cmdID, Command: hugeCommand, Error: poisontest.Hidden + "\r\nfake line"})
	if err != nil {
		t.Fatal(err)
	}
	natstest.Report(t, ctx, st, hb, res)
	identity, err := st.JetStream().KeyValue(ctx, events.BucketIdentity)
	if err != nil {
		t.Fatal(err)
	}
	actions, err := dashboard.NewFleetActions(c, nil, st, identity, nil)
	if err != nil {
		t.Fatal(err)
	}

	ca, err := cache.New(srv.RESTConfig(), cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- ca.Start(cctx) }()
	defer func() { ccancel(); <-cacheDone }()
	view, err := fleetview.NewLive(fleetview.Options{Cache: ca, Informers: ca, Streams: st, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if !ca.WaitForCacheSync(ctx) {
		t.Fatal("the informer cache did not sync")
	}
	// The mock sign-in (and its banner) with a live view: the page's data
	// is the real fleet's.
	o, _ := mockOptions(t, nil)
	o.View, o.Actions = view, actions
	_, base := serve(t, o)
	b := newBrowser(t, base)
	signInMock(t, b, base, dashboard.RoleAdmin)
	var body string
	err = testenv.Poll(ctx, 60*time.Second, func() bool {
		var status int
		status, _, body = b.get(base + "/devices/" + id + "?command=" + cmdID)
		return status == http.StatusOK && strings.Contains(body, "Debian") && strings.Contains(body, "the agent answered")
	})
	if err != nil {
		t.Fatalf("the device page: %v\n%s", err, body)
	}
	text := html.UnescapeString(body)
	if _, after, ok := strings.Cut(text, "the agent answered “"); !ok {
		t.Error("the device page shows no command result")
	} else if command, _, _ := strings.Cut(after, "”"); len(command) > fleetview.MaxFieldLength+len("…") {
		t.Errorf("the device page shows the command the agent named in %d bytes, over %d", len(command), fleetview.MaxFieldLength)
	}
	if strings.Contains(text, strings.Repeat("c", fleetview.MaxErrorLength)) {
		t.Error("the device page shows the command the agent named unbounded")
	}
	for _, want := range []string{`v1.4\u202e2-exe`, `Debian\u2066 12`, `6.1\u200b.0`, `answered “v1\u202egnp.exe`, `with: <q>v1\u202egnp.exe`} {
		if !strings.Contains(text, want) {
			t.Errorf("the device page lacks %s", want)
		}
	}
	if i := strings.IndexFunc(text, func(r rune) bool { return r != '\n' && r != '\t' && r != '\r' && events.Invisible(r) }); i >= 0 {
		t.Errorf("the device page prints a hidden character raw: %q", text[max(0, i-40):min(len(text), i+40)])
	}
	// The device list's Runs column shows the same text escaped.
	_, _, body = b.get(base + "/devices?q=" + id)
	text = html.UnescapeString(body)
	for _, want := range []string{ns + `/web\u202egnp.exe`, `Crash\u2066Loop`} {
		if !strings.Contains(text, want) {
			t.Errorf("the device list lacks %s", want)
		}
	}
	if i := strings.IndexFunc(text, func(r rune) bool { return r != '\n' && r != '\t' && r != '\r' && events.Invisible(r) }); i >= 0 {
		t.Errorf("the device list prints a hidden character raw: %q", text[max(0, i-40):min(len(text), i+40)])
	}
}

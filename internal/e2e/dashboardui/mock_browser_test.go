package dashboardui

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/dashboard"
	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/internal/testenv/browser"
)

// serveMock serves the dashboard of `serve-web --mock` (generated data for
// 40 devices, mock sign-in) on a free loopback port until the test ends.
func serveMock(t *testing.T) string {
	t.Helper()
	return serveView(t, fleetview.Mock(1, 40))
}

// serveView serves the dashboard of `serve-web --mock` (mock sign-in and
// actions) on view, on a free loopback port until the test ends.
func serveView(t *testing.T, view fleetview.Source) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	key := make([]byte, dashboard.SessionKeySize)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	srv, err := dashboard.New(dashboard.Options{
		PublicURL: url, SessionKey: key, Mock: true, MockSignIn: true,
		View: view, Actions: dashboard.NewMockActions(), Acks: dashboard.NewMemoryAcks(),
	})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("the mock dashboard stopped with %v", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("the mock dashboard did not stop within a minute")
		}
	})
	return url
}

// TestEveryPageOfTheMockDashboardPassesAxe walks every page of the mock
// dashboard (its generated fleet fills every table: failed rollouts, stale
// devices, TaskRuns, alerts) and checks each with axe-core; the mock
// sign-in page and the 403 page too.
func TestEveryPageOfTheMockDashboardPassesAxe(t *testing.T) {
	url := serveMock(t)
	b := browser.Start(t)

	viewer := b.NewPage(t)
	viewer.Open(url + "/")
	viewer.WaitVisible("#role-none")
	viewer.CheckAccessibility("the mock sign-in page")
	viewer.Click("#role-none")
	if status := viewer.ClickAndWaitLoad(`form[action="/login/mock"] button[type=submit]`); status != http.StatusForbidden {
		t.Errorf("the mock viewer got %d, want 403", status)
	}
	viewer.CheckAccessibility("the 403 page")

	p := b.NewPage(t)
	p.Open(url + "/")
	p.WaitVisible("#role-admin")
	if status := p.ClickAndWaitLoad(`form[action="/login/mock"] button[type=submit]`); status != http.StatusOK {
		t.Fatalf("the mock admin got %d, want 200", status)
	}
	for _, pg := range []struct {
		path, what string
		follow     string // a link to the detail page to check next
		detail     string
	}{
		{"/", "the overview page", "", ""},
		{"/devices", "the device list", `table a[href^="/devices/"]`, "a device page"},
		{"/deployments", "the Deployment list", `table a[href^="/deployments/"]`, "a Deployment page"},
		{"/taskruns", "the TaskRun list", `table a[href^="/taskruns/"]`, "a TaskRun page"},
		{"/alerts", "the alerts page", "", ""},
	} {
		if status := p.Open(url + pg.path); status != http.StatusOK {
			t.Errorf("GET %s: %d", pg.path, status)
			continue
		}
		p.CheckAccessibility(pg.what + " (mock)")
		if pg.follow == "" {
			continue
		}
		p.WaitVisible(pg.follow)
		href := browser.Eval[string](p, `document.querySelector(`+strconv.Quote(pg.follow)+`).getAttribute("href")`)
		if status := p.Open(url + href); status != http.StatusOK {
			t.Errorf("GET %s: %d", href, status)
			continue
		}
		p.CheckAccessibility(pg.detail + " (mock, " + href + ")")
	}
	// A page that does not exist.
	if status := p.Open(url + "/no-such-page"); status != http.StatusNotFound {
		t.Errorf("GET /no-such-page: %d, want 404", status)
	}
	p.CheckAccessibility("the 404 page")
}

// TestWorkloadHealthOnTheMockDashboardPassesAxe opens the mock's Deployment
// that is Succeeded but Degraded (two devices crash-loop since its
// rollout), one of its degraded devices' page with its containers table,
// and the alerts, and checks that each shows the health and passes
// axe-core.
func TestWorkloadHealthOnTheMockDashboardPassesAxe(t *testing.T) {
	url := serveMock(t)
	b := browser.Start(t)
	p := b.NewPage(t)
	p.Open(url + "/")
	p.WaitVisible("#role-admin")
	if status := p.ClickAndWaitLoad(`form[action="/login/mock"] button[type=submit]`); status != http.StatusOK {
		t.Fatalf("the mock admin got %d, want 200", status)
	}

	if status := p.Open(url + "/deployments/fleet/telemetry-collector"); status != http.StatusOK {
		t.Fatalf("the degraded Deployment's page: %d", status)
	}
	p.WaitText("#degraded", "Degraded")
	p.WaitText("#degraded", "2 devices run this revision")
	p.WaitText("#degraded li", "CrashLoop")
	p.WaitText(".phase", "Succeeded")
	p.WaitText("main", "device.workload.degraded")
	p.CheckAccessibility("a Degraded Deployment's page (mock)")

	href := browser.Eval[string](p, `document.querySelector("#degraded li a").getAttribute("href")`)
	if status := p.Open(url + href); status != http.StatusOK {
		t.Fatalf("GET %s: %d", href, status)
	}
	p.WaitVisible("#containers")
	p.WaitText("#containers", "Degraded: CrashLoop")
	p.WaitText("#containers", "code 2")
	p.WaitText("#containers", "sha256:")
	p.CheckAccessibility("a degraded device's page with its containers (mock, " + href + ")")

	if status := p.Open(url + "/alerts"); status != http.StatusOK {
		t.Fatalf("the alerts page: %d", status)
	}
	p.WaitText("main", "deployment-degraded")
	p.WaitText("main", "rollout-stalled")
	p.CheckAccessibility("the alerts page with a degraded Deployment (mock)")

	if status := p.Open(url + "/deployments"); status != http.StatusOK {
		t.Fatalf("the Deployment list: %d", status)
	}
	p.WaitText("table", "Degraded")
	p.CheckAccessibility("the Deployment list with a degraded Deployment (mock)")
}

// TestTheChartsTheRolloutControlsAndTheViewerRoleOnTheMockDashboardPassAxe
// opens the mock's rollout in batches (its second batch awaits approval)
// as the admin, with its progress chart and controls, approves the batch,
// and opens the overview's 24-hour chart and the device list's Runs
// column; then every page as mock-viewer (fleet-viewer), which shows no
// action. axe-core checks each page.
func TestTheChartsTheRolloutControlsAndTheViewerRoleOnTheMockDashboardPassAxe(t *testing.T) {
	url := serveMock(t)
	b := browser.Start(t)
	const rollout = "/deployments/fleet/video-analytics"

	admin := b.NewPage(t)
	admin.Open(url + "/")
	admin.WaitVisible("#role-admin")
	if status := admin.ClickAndWaitLoad(`form[action="/login/mock"] button[type=submit]`); status != http.StatusOK {
		t.Fatalf("the mock admin got %d, want 200", status)
	}
	admin.Open(url + rollout)
	admin.WaitVisible(`#h-progress ~ svg.chart[role="img"] rect.bar-ok`)
	admin.WaitText("main", "Batch 2 of 3 awaits approval")
	admin.WaitText("main", "every canary converged")
	admin.CheckAccessibility("a Deployment page with its progress chart and rollout controls (mock)")
	admin.ClickAndWaitLoad(`form[action$="/rollout"]:has(input[value="approve"]) button[type=submit]`)
	admin.WaitText(".notice", "Approval of batch 2 requested")
	admin.Open(url + "/")
	admin.WaitVisible(`#h-trend ~ svg.chart[role="img"] rect.bar-hb`)
	admin.CheckAccessibility("the overview with its 24-hour chart (mock)")
	admin.Open(url + "/devices")
	admin.WaitVisible(`table td a[href="` + rollout + `"]`)
	admin.Open(url + "/alerts")
	admin.WaitText("main", "has never connected")

	viewer := b.NewPage(t)
	viewer.Open(url + "/")
	viewer.WaitVisible("#role-viewer")
	viewer.Click("#role-viewer")
	if status := viewer.ClickAndWaitLoad(`form[action="/login/mock"] button[type=submit]`); status != http.StatusOK {
		t.Fatalf("the mock viewer got %d, want 200", status)
	}
	for _, pg := range []string{"/", "/devices", "/devices/" + mockDevice(t, viewer, url), rollout, "/deployments", "/taskruns", "/alerts"} {
		if status := viewer.Open(url + pg); status != http.StatusOK {
			t.Errorf("GET %s as mock-viewer: %d", pg, status)
			continue
		}
		if n := browser.Eval[int](viewer, `document.querySelectorAll('form[method="post"]:not([action="/logout"])').length`); n != 0 {
			t.Errorf("GET %s as mock-viewer offers %d actions", pg, n)
		}
		viewer.CheckAccessibility(pg + " as a fleet-viewer (mock)")
	}
	viewer.Open(url + rollout)
	viewer.WaitText("main", "Read-only: approving, pausing and resuming need the fleet-admin role.")
}

// mockDevice returns the id of the first device the mock's list shows.
func mockDevice(t *testing.T, p *browser.Page, url string) string {
	t.Helper()
	p.Open(url + "/devices")
	p.WaitVisible(`table a[href^="/devices/"]`)
	href := browser.Eval[string](p, `document.querySelector('table a[href^="/devices/"]').getAttribute("href")`)
	return href[len("/devices/"):]
}

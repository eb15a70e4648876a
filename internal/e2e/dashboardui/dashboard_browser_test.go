package dashboardui

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/browser"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// TestTheDashboardInARealBrowser uses the dashboard of a whole Fleet on
// this machine (the operator, NATS with the auth callout, the development
// OpenID Provider, a real kube-apiserver, three agents on the simulated
// runtime) in headless Chromium, as an operator would: signs in on the
// provider's login page, is refused without the fleet-admin role, watches
// a rollout on the Deployment page without reloading it, approves a batch
// there (recorded under her own Kubernetes name), pauses and resumes it
// there (the Deployment's status says who paused it), quarantines a
// device and sees it cut off, sends an agent command and reads its answer,
// and acknowledges an alert that is still acknowledged after the operator
// and the dashboard restart. axe-core checks every page for serious and
// critical violations. Screenshots go to the test's artifact folder (go
// test -artifacts); FLEET_DOCS_SCREENSHOTS=1 refreshes docs/dashboard/.
func TestTheDashboardInARealBrowser(t *testing.T) {
	f := startFleet(t)
	issuer := f.plane.Provider().Issuer()
	b := browser.Start(t)
	admin := b.NewPage(t)
	// Rollouts, liveness and restarts take seconds; a loaded machine
	// (CI runs packages in parallel) stretches them.
	admin.SetTimeout(pageTimeout)

	t.Run("the admin signs in on the development provider's login page", func(t *testing.T) {
		admin := admin.For(t)
		// A wrong password first: the form says so, and only that.
		admin.Open(f.URL + "/")
		admin.WaitVisible("#username")
		admin.Fill("#username", adminUser)
		admin.Fill("#password", "not-"+adminPassword)
		if status := admin.ClickAndWaitLoad(`button[type=submit]`); status != http.StatusUnauthorized {
			t.Errorf("a wrong password: %d, want 401", status)
		}
		admin.WaitText("#login-error", "Wrong user name or password")
		admin.CheckAccessibility("the login page after a wrong password")
		signIn(t, admin, f.URL, issuer, adminUser, adminPassword, http.StatusOK)
		admin.WaitText("header", "Signed in as "+adminUser)
		admin.WaitVisible(`nav[aria-label="Main"]`)
		admin.WaitText("main h1", "Fleet overview")
		admin.CheckAccessibility("the overview page")
		checkConsole(t, admin)
	})
	if t.Failed() {
		t.FailNow()
	}

	t.Run("a user without the fleet-admin role is refused", func(t *testing.T) {
		viewer := b.NewPage(t) // a browser context of its own: no admin cookie
		viewer.SetTimeout(pageTimeout)
		signIn(t, viewer, f.URL, issuer, viewerUser, viewerPassword, http.StatusForbidden)
		viewer.WaitText("main", "needs the fleet-admin role")
		if n := viewer.Count(`nav[aria-label="Main"]`); n != 0 {
			t.Errorf("the 403 page shows the main navigation to a user without the role")
		}
		viewer.DocScreenshot("forbidden")
		viewer.CheckAccessibility("the 403 page")
		for _, path := range []string{"/devices", "/devices/edge-1", "/deployments", "/alerts"} {
			if got := viewer.Open(f.URL + path); got != http.StatusForbidden {
				t.Errorf("GET %s as %s: %d, want 403", path, viewerUser, got)
			}
		}
		checkConsole(t, viewer)
	})

	t.Run("every device is listed and online", func(t *testing.T) {
		admin := admin.For(t)
		admin.Open(f.URL + "/devices")
		for _, d := range devices {
			admin.WaitMatch(`tr:has(a[href="/devices/`+d+`"])`, `(?i)\bonline\b`)
		}
		admin.CheckAccessibility("the device list")
		checkConsole(t, admin)
	})

	t.Run("a rollout progresses on the Deployment page without a reload", func(t *testing.T) {
		admin := admin.For(t)
		f.apply(deployment("web", imageV1))
		admin.Open(f.URL + "/deployments/" + f.ns + "/web")
		admin.WaitText("main", "3 succeeded, 0 pending, 0 failed, of 3")
		markNoReload(admin)
		// A new revision: the page follows it through live updates.
		f.apply(deployment("web", imageV2))
		admin.WaitText("main", "(generation 2, observed 2)")
		admin.WaitMatch("main", `(?s)Targets\s+3 succeeded, 0 pending, 0 failed, of 3`)
		admin.WaitText("main", imageV2)
		admin.WaitText("#live-status", "Updated")
		checkNoReload(t, admin)
		admin.DocScreenshot("deployment")
		admin.CheckAccessibility("the Deployment page")

		// Each revision links to the fleet as it was then, folded from
		// the streams.
		admin.ClickAndWaitLoad(`#live table a[href^="/fleet?at="]`)
		admin.WaitText("main", "This is history, not the live state")
		admin.WaitVisible(`table a[href="/deployments/` + f.ns + `/web"]`)
		admin.CheckAccessibility("the fleet as of a time")

		// What each device runs, from its container reports.
		admin.Open(f.URL + "/devices")
		admin.WaitVisible(`table td a[href="/deployments/` + f.ns + `/web"]`)
		admin.DocScreenshot("devices")
		admin.CheckAccessibility("the device list with what each device runs")

		admin.Open(f.URL + "/deployments")
		admin.WaitVisible(`table a[href="/deployments/` + f.ns + `/web"]`)
		admin.DocScreenshot("deployments")
		admin.CheckAccessibility("the Deployment list")
		checkConsole(t, admin)
	})

	t.Run("the admin approves a batch from the Deployment page, as herself", func(t *testing.T) {
		admin := admin.For(t)
		f.apply(deploymentWith("api", imageV1, "  rollout:\n    batches: [{count: 1}]\n    approval: Manual\n"))
		page := f.URL + "/deployments/" + f.ns + "/api"
		admin.Open(page)
		admin.WaitText("main", "every canary converged; batch 1 awaits approval")
		admin.WaitVisible(`#h-progress ~ svg.chart[role="img"]`)
		admin.DocScreenshot("deployment-approval")
		admin.CheckAccessibility("a Deployment page awaiting approval")
		admin.ClickAndWaitLoad(`form[action$="/rollout"]:has(input[value="approve"]) button[type=submit]`)
		admin.WaitText(".notice", "Approval of batch 1 requested")
		admin.WaitText("main", "batch 1 approved by oidc:"+adminUser)
		checkConsole(t, admin)
	})

	t.Run("the admin pauses and resumes the rollout from the Deployment page, as herself, and the Deployment says so", func(t *testing.T) {
		admin := admin.For(t)
		page := f.URL + "/deployments/" + f.ns + "/api"
		plan := func() fleetv1.PlanStatus {
			var d fleetv1.Deployment
			if err := f.kube.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "api"}, &d); err != nil {
				t.Fatal(err)
			}
			if d.Status.Plan == nil {
				return fleetv1.PlanStatus{}
			}
			return *d.Status.Plan
		}
		admin.Open(page)
		admin.ClickAndWaitLoad(`form[action$="/rollout"]:has(input[value="pause"]) button[type=submit]`)
		admin.WaitText(".notice", "Pause requested")
		admin.WaitText("main", "Paused by oidc:"+adminUser)
		testenv.Eventually(t, "the Deployment's status.plan paused by oidc:"+adminUser, time.Minute, func() bool {
			p := plan()
			return p.Paused && p.PausedBy == "oidc:"+adminUser
		})
		admin.CheckAccessibility("a paused Deployment page")
		admin.ClickAndWaitLoad(`form[action$="/rollout"]:has(input[value="resume"]) button[type=submit]`)
		admin.WaitText(".notice", "Resume requested")
		admin.WaitVisible(`form[action$="/rollout"]:has(input[value="pause"]) button[type=submit]`)
		testenv.Eventually(t, "the Deployment's status.plan no longer paused", time.Minute, func() bool { return !plan().Paused })
		checkConsole(t, admin)
	})

	t.Run("a quarantined device is cut off", func(t *testing.T) {
		admin := admin.For(t)
		admin.Open(f.URL + "/devices/edge-3")
		admin.WaitText("main", "Not quarantined")
		admin.WaitMatch(".props .live", `(?i)^online$`)
		admin.CheckAccessibility("the device page")
		admin.ClickAndWaitLoad(`form[action$="/quarantine"] button[type=submit]`)
		markNoReload(admin)
		admin.WaitText("main", "Quarantined")
		admin.WaitText("main", "the auth callout refuses this device's identity: its connections are closed")
		// Cut off, the agent no longer heartbeats: the operator marks it
		// Stale (after 3 s here) and the page follows.
		admin.WaitMatch(".props .live", `(?i)^stale$`)
		checkNoReload(t, admin)
		admin.DocScreenshot("device-quarantined")
		admin.CheckAccessibility("the device page of a quarantined device")
		checkConsole(t, admin)
	})

	t.Run("a command sent from the device page gets the agent's answer", func(t *testing.T) {
		admin := admin.For(t)
		admin.Open(f.URL + "/devices/edge-2")
		admin.WaitVisible(`form[action$="/command"]`)
		admin.Click(`input[name=command][value="report-inventory"]`)
		admin.ClickAndWaitLoad(`form[action$="/command"] button[type=submit]`)
		admin.WaitText(".result", "Command ")
		admin.WaitText(".result", "Succeeded: the agent answered “report-inventory”")
		admin.DocScreenshot("device-command")
		admin.CheckAccessibility("the device page with a command's answer")
		checkConsole(t, admin)
	})

	t.Run("TaskRuns are listed and shown", func(t *testing.T) {
		admin := admin.For(t)
		f.apply(taskRun("upgrade"))
		admin.Open(f.URL + "/taskruns")
		admin.WaitVisible(`table a[href="/taskruns/` + f.ns + `/upgrade"]`)
		admin.DocScreenshot("taskruns")
		admin.CheckAccessibility("the TaskRun list")
		admin.Open(f.URL + "/taskruns/" + f.ns + "/upgrade")
		admin.WaitText("main", "system-upgrade")
		admin.CheckAccessibility("the TaskRun page")
		checkConsole(t, admin)
	})

	t.Run("an acknowledged alert is still acknowledged after the operator restarts", func(t *testing.T) {
		admin := admin.For(t)
		// A Deployment that fails on every device raises an alert.
		f.apply(deployment("broken", imageBroken))
		admin.Open(f.URL + "/deployments/" + f.ns + "/broken")
		admin.WaitMatch("main", `Phase\s+Failed`)
		admin.Open(f.URL + "/alerts")
		row := `tr:has(a[href="/deployments/` + f.ns + `/broken"])`
		admin.WaitVisible(row + ` form[action="/alerts/ack"]`)
		alert := browser.Eval[string](admin, `document.querySelector(`+jsString(row+` input[name=alert]`)+`).value`)
		admin.CheckAccessibility("the alerts page")
		admin.ClickAndWaitLoad(row + ` form[action="/alerts/ack"] button[type=submit]`)
		admin.WaitText(row, "Acknowledged by "+adminUser)
		admin.DocScreenshot("alerts")

		f.restart()
		// The session cookie is sealed with the same key and the new
		// address is on the same host: still signed in.
		admin.Open(f.URL + "/alerts")
		admin.WaitText(row, "Acknowledged by "+adminUser)
		if got := browser.Eval[int](admin, `document.querySelectorAll(`+jsString(row+` input[name=alert]`)+`).length`); got != 0 {
			t.Errorf("after the restart the alert %q offers an Acknowledge button again", alert)
		}
		admin.Open(f.URL + "/")
		admin.WaitText("main h1", "Fleet overview")
		admin.DocScreenshot("overview")
		admin.CheckAccessibility("the overview page after the restart")
		// The 24-hour chart, further down.
		admin.WaitVisible(`#h-trend ~ svg.chart[role="img"]`)
		browser.Eval[bool](admin, `document.getElementById("h-trend").scrollIntoView(), true`)
		admin.DocScreenshot("overview-trend")
		checkConsole(t, admin)
	})

	t.Run("signing out ends the session", func(t *testing.T) {
		admin := admin.For(t)
		admin.Open(f.URL + "/devices")
		admin.ClickAndWaitLoad(`form[action="/logout"] button[type=submit]`)
		admin.WaitText("main", "You are signed out")
		admin.CheckAccessibility("the signed-out page")
		// Without a session the dashboard sends the browser to sign in.
		admin.Open(f.URL + "/devices")
		admin.WaitVisible("#username")
		if at := admin.URL(); !strings.HasPrefix(at, strings.TrimSuffix(issuer, "/")+"/login") {
			t.Errorf("after signing out /devices led to %s, want the provider's login page", at)
		}
		checkConsole(t, admin)
	})
}

// pageTimeout is how long a step waits for what it expects to see.
const pageTimeout = 90 * time.Second

// signIn opens the dashboard in p, which sends it to the development
// provider's login page; checks that page with axe-core, signs in as user
// and checks the dashboard page the browser lands on answers want.
func signIn(t *testing.T, p *browser.Page, dashboard, issuer, user, password string, want int) {
	t.Helper()
	p.Open(dashboard + "/")
	p.WaitVisible("#username")
	if at := p.URL(); !strings.HasPrefix(at, strings.TrimSuffix(issuer, "/")+"/login") {
		t.Fatalf("the dashboard sent a browser without a session to %s, want the provider's login page %s/login", at, issuer)
	}
	p.CheckAccessibility("the development provider's login page")
	p.DocScreenshot("login")
	p.Fill("#username", user)
	p.Fill("#password", password)
	status := p.ClickAndWaitLoad(`button[type=submit]`)
	at := p.URL()
	if u, err := url.Parse(at); err != nil || !strings.HasPrefix(at, dashboard) || u.Path != "/" {
		t.Fatalf("after signing in the browser is at %s, want the dashboard's %s/", at, dashboard)
	}
	if status != want {
		t.Fatalf("after signing in as %s the dashboard answered %d, want %d", user, status, want)
	}
}

// checkConsole fails when the page's console holds a script error or a
// refusal of the browser's (a Content-Security-Policy violation): the
// dashboard's scripts must run under its own policy.
func checkConsole(t *testing.T, p *browser.Page) {
	t.Helper()
	for _, m := range p.Console() {
		if strings.HasPrefix(m, "[exception]") || strings.HasPrefix(m, "[security") || strings.HasPrefix(m, "[console error]") {
			t.Errorf("the browser's console: %s", m)
		}
	}
}

// markNoReload leaves a mark on the page's window object; a reload or a
// navigation loses it.
func markNoReload(p *browser.Page) {
	browser.Eval[bool](p, `window.fleetTestMark = true`)
}

// checkNoReload fails unless the mark markNoReload left is still there.
func checkNoReload(t *testing.T, p *browser.Page) {
	t.Helper()
	if !browser.Eval[bool](p, `window.fleetTestMark === true`) {
		t.Errorf("the page was reloaded: its updates should arrive live")
	}
}

// jsString quotes s for JavaScript (a Go quoted string is a valid one for
// the selectors used here).
func jsString(s string) string { return strconv.Quote(s) }

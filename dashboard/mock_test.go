package dashboard_test

import (
	"context"
	"crypto/rand"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/dashboard"
	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
)

func key(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, dashboard.SessionKeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// mockOptions are serve-web --mock's options.
func mockOptions(t *testing.T, log *slog.Logger) (dashboard.Options, *dashboard.MemoryAcks) {
	t.Helper()
	view := fleetview.Mock(1, 60)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = view.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	acks := dashboard.NewMemoryAcks()
	return dashboard.Options{Logger: log, SessionKey: key(t), Mock: true, MockSignIn: true, View: view,
		Actions: dashboard.NewMockActions(), Acks: acks}, acks
}

// signInMock signs in through the mock sign-in form.
func signInMock(t *testing.T, b *browser, base, role string) string {
	t.Helper()
	status, _, body := b.get(base + "/login")
	if status != http.StatusOK || !strings.Contains(body, "mock sign-in") {
		t.Fatalf("mock sign-in page: %d\n%s", status, body)
	}
	status, _, body = b.post(base+"/login/mock", url.Values{"role": {role}, "return": {"/"}}, base)
	if role == dashboard.RoleAdmin && status != http.StatusOK {
		t.Fatalf("after mock sign-in: %d\n%s", status, body)
	}
	return body
}

var href = regexp.MustCompile(`href="(/(?:devices|deployments|taskruns)/[^"?]+)"`)

func TestEveryMockPageRendersWithTheMockBanner(t *testing.T) {
	o, _ := mockOptions(t, nil)
	_, base := serve(t, o)
	b := newBrowser(t, base)
	signInMock(t, b, base, dashboard.RoleAdmin)
	pages := []string{"/", "/devices", "/devices?liveness=stale", "/devices?selector=canary%3Dtrue", "/devices?q=a&offset=10", "/deployments", "/taskruns", "/alerts"}
	// One page of each kind the lists link to.
	seen := map[string]bool{}
	for _, list := range []string{"/devices", "/deployments", "/taskruns"} {
		_, _, body := b.get(base + list)
		for _, m := range href.FindAllStringSubmatch(body, -1) {
			kind := strings.Split(m[1], "/")[1]
			if !seen[kind] {
				seen[kind] = true
				pages = append(pages, m[1])
			}
		}
	}
	if len(seen) != 3 {
		t.Fatalf("the mock lists link to pages of kinds %v, want devices, deployments and taskruns", seen)
	}
	// The fleet as of a revision, which a Deployment page links to.
	for _, p := range pages {
		if strings.HasPrefix(p, "/deployments/") {
			_, _, body := b.get(base + p)
			m := regexp.MustCompile(`href="(/fleet\?at=[^"]+)"`).FindStringSubmatch(body)
			if m == nil {
				t.Fatalf("the Deployment page %s links to no fleet-as-of page:\n%s", p, body)
			}
			pages = append(pages, m[1])
			break
		}
	}
	t.Run("a Deployment rolling out in batches shows its plan", func(t *testing.T) {
		_, _, list := b.get(base + "/deployments")
		for _, m := range href.FindAllStringSubmatch(list, -1) {
			if !strings.HasPrefix(m[1], "/deployments/") {
				continue
			}
			_, _, body := b.get(base + m[1])
			if strings.Contains(body, `<h2 id="h-plan">Rollout plan</h2>`) {
				if !strings.Contains(body, "awaits approval") || !strings.Contains(body, "fleet rollout approve ") {
					t.Errorf("the plan section of %s does not say how to approve the waiting batch:\n%s", m[1], body)
				}
				return
			}
		}
		t.Error("no mock Deployment page shows a rollout plan")
	})
	t.Run("a Deployment past its progress deadline shows that its rollout stalled, and is alerted", func(t *testing.T) {
		_, _, list := b.get(base + "/deployments")
		found := false
		for _, m := range href.FindAllStringSubmatch(list, -1) {
			if !strings.HasPrefix(m[1], "/deployments/") {
				continue
			}
			_, _, body := b.get(base + m[1])
			if strings.Contains(body, "<strong>Rollout stalled</strong>") {
				found = true
				if !strings.Contains(body, "no progress within its progress deadline") || !strings.Contains(body, "registry unavailable, retrying") {
					t.Errorf("the stalled banner of %s does not name the waiting devices' report:\n%s", m[1], body)
				}
			}
		}
		if !found {
			t.Error("no mock Deployment page shows a stalled rollout")
		}
		_, _, alerts := b.get(base + "/alerts")
		if !strings.Contains(alerts, "rollout stalled: ") || !strings.Contains(alerts, "(rollout-stalled)") {
			t.Errorf("the alerts page lists no rollout-stalled alert:\n%s", alerts)
		}
	})
	for _, p := range pages {
		t.Run(p, func(t *testing.T) {
			status, _, body := b.get(base + p)
			if status != http.StatusOK {
				t.Fatalf("status %d\n%s", status, body)
			}
			for _, want := range []string{`class="mock-banner"`, "Mock data.", `<main id="main"`, "<h1>", `lang="en"`} {
				if !strings.Contains(body, want) {
					t.Errorf("the page lacks %q", want)
				}
			}
		})
	}
}

func TestAUserWithoutTheFleetAdminRoleGetsTheAccessDeniedPage(t *testing.T) {
	o, _ := mockOptions(t, nil)
	_, base := serve(t, o)
	b := newBrowser(t, base)
	signInMock(t, b, base, "none")
	for _, p := range []string{"/", "/devices", "/alerts"} {
		status, _, body := b.get(base + p)
		if status != http.StatusForbidden || !strings.Contains(body, "fleet-admin") {
			t.Errorf("GET %s: status %d, want 403 naming fleet-admin\n%s", p, status, body)
		}
	}
}

func TestAStateChangingRequestWithoutTheRightCSRFTokenOrOriginIsRefusedAndChangesNothing(t *testing.T) {
	o, acks := mockOptions(t, nil)
	_, base := serve(t, o)
	b := newBrowser(t, base)
	signInMock(t, b, base, dashboard.RoleAdmin)
	_, _, body := b.get(base + "/alerts")
	token := csrf(t, body)
	alert := regexp.MustCompile(`name="alert" value="([^"]+)"`).FindStringSubmatch(body)
	if alert == nil {
		t.Fatalf("the mock alert page offers no alert to acknowledge:\n%s", body)
	}
	tests := []struct {
		name   string
		form   url.Values
		origin string
	}{
		{"a form without a token is refused", url.Values{"alert": {alert[1]}}, base},
		{"a form with a wrong token is refused", url.Values{"alert": {alert[1]}, "csrf": {token + "x"}}, base},
		{"a form with another session's token is refused", url.Values{"alert": {alert[1]}, "csrf": {"bm90LXRoaXMtc2Vzc2lvbnMtdG9rZW4"}}, base},
		{"a form from another origin is refused despite the right token", url.Values{"alert": {alert[1]}, "csrf": {token}}, "https://evil.example"},
		{"a form with neither Origin nor Referer is refused", url.Values{"alert": {alert[1]}, "csrf": {token}}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := b.post(base+"/alerts/ack", tc.form, tc.origin)
			if status != http.StatusForbidden {
				t.Errorf("status %d, want 403\n%s", status, body)
			}
			all, _ := acks.All(context.Background())
			if len(all) != 0 {
				t.Errorf("acknowledgements after a refused request: %v", all)
			}
		})
	}
	status, _, body := b.post(base+"/alerts/ack", url.Values{"alert": {alert[1]}, "csrf": {token}}, base)
	if status != http.StatusOK || !strings.Contains(body, "Acknowledged by mock-admin") {
		t.Fatalf("the right token from the right origin: status %d\n%s", status, body)
	}
}

func TestTheSessionCookieIsHttpOnlySameSiteAndSecureOnHTTPS(t *testing.T) {
	tests := []struct {
		name       string
		public     string
		wantName   string
		wantSecure bool
	}{
		{"on https the cookie is Secure with the __Host- prefix", "https://fleet.example.com", "__Host-fleet_session", true},
		{"on plain-http loopback (development) the cookie is not Secure", "http://127.0.0.1:8080", "fleet_session", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o, _ := mockOptions(t, nil)
			o.PublicURL = tc.public
			srv, err := dashboard.New(o)
			if err != nil {
				t.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodPost, tc.public+"/login/mock", strings.NewReader("role=fleet-admin"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Origin", tc.public)
			rec := httptest.NewRecorder()
			srv.Handler().ServeHTTP(rec, req)
			cookies := rec.Result().Cookies()
			if len(cookies) != 1 {
				t.Fatalf("cookies %v, want one", cookies)
			}
			c := cookies[0]
			if c.Name != tc.wantName || c.Secure != tc.wantSecure || !c.HttpOnly || c.SameSite != http.SameSiteLaxMode || c.Path != "/" || c.Domain != "" || c.MaxAge <= 0 {
				t.Errorf("cookie %s: Secure %v HttpOnly %v SameSite %v Path %q Domain %q MaxAge %d", c.Name, c.Secure, c.HttpOnly, c.SameSite, c.Path, c.Domain, c.MaxAge)
			}
		})
	}
}

func TestASignedOutSessionCookieNoLongerOpensAPage(t *testing.T) {
	o, _ := mockOptions(t, nil)
	_, base := serve(t, o)
	b := newBrowser(t, base)
	body := signInMock(t, b, base, dashboard.RoleAdmin)
	u, _ := url.Parse(base)
	old := b.c.Jar.Cookies(u)
	status, final, _ := b.post(base+"/logout", url.Values{"csrf": {csrf(t, body)}}, base)
	if status != http.StatusOK || !strings.HasSuffix(final, "/signed-out") {
		t.Fatalf("sign-out: %d at %s", status, final)
	}
	b.c.Jar.SetCookies(u, old)
	_, final, _ = b.get(base + "/devices")
	if !strings.Contains(final, "/login") {
		t.Errorf("the signed-out cookie still opened /devices (ended at %s)", final)
	}
}

func TestATamperedSessionCookieOpensNoPage(t *testing.T) {
	o, _ := mockOptions(t, nil)
	_, base := serve(t, o)
	b := newBrowser(t, base)
	signInMock(t, b, base, dashboard.RoleAdmin)
	u, _ := url.Parse(base)
	cs := b.c.Jar.Cookies(u)
	v := []byte(cs[0].Value)
	v[len(v)/2] ^= 1
	cs[0].Value = string(v)
	b.c.Jar.SetCookies(u, cs)
	_, final, _ := b.get(base + "/devices")
	if !strings.Contains(final, "/login") {
		t.Errorf("a tampered cookie opened /devices (ended at %s)", final)
	}
}

func TestOptionsValidateNamesTheWrongField(t *testing.T) {
	good, _ := mockOptions(t, nil)
	good.PublicURL = "https://fleet.example.com"
	tests := []struct {
		name   string
		change func(*dashboard.Options)
		want   string
	}{
		{"plain http on a host that is not loopback is refused", func(o *dashboard.Options) { o.PublicURL = "http://fleet.example.com" }, "not loopback"},
		{"a public URL with a path is refused", func(o *dashboard.Options) { o.PublicURL = "https://fleet.example.com/dash" }, "no path"},
		{"a short session key is refused", func(o *dashboard.Options) { o.SessionKey = []byte("short") }, "session key"},
		{"mock sign-in without mock data is refused", func(o *dashboard.Options) { o.Mock = false }, "mock sign-in"},
		{"no sign-in at all is refused", func(o *dashboard.Options) { o.MockSignIn, o.Mock = false, false }, "OIDC is required"},
		{"an OIDC client without id is refused", func(o *dashboard.Options) {
			o.MockSignIn, o.Mock = false, false
			o.OIDC = &dashboard.OIDC{Issuer: "https://idp.example.com"}
		}, "client id"},
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("the base options: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			tc.change(&o)
			err := o.Validate()
			if !errors.Is(err, dashboard.ErrInvalidOptions) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want ErrInvalidOptions naming %q", err, tc.want)
			}
		})
	}
}

func TestTheOIDCOptionsNeverPrintTheClientSecret(t *testing.T) {
	o := dashboard.OIDC{Issuer: "https://idp.example.com", ClientID: "dash", ClientSecret: "s3cr3t-value"}
	for _, s := range []string{o.String(), o.GoString()} {
		if strings.Contains(s, "s3cr3t-value") {
			t.Errorf("%s shows the secret", s)
		}
	}
}

func TestARolloutRequestFromTheDeploymentPageIsCheckedThenWrittenAsTheUser(t *testing.T) {
	o, _ := mockOptions(t, nil)
	_, base := serve(t, o)
	const page = "/deployments/fleet/video-analytics"
	admin := newBrowser(t, base)
	signInMock(t, admin, base, dashboard.RoleAdmin)
	_, _, body := admin.get(base + page)
	token := csrf(t, body)
	tests := []struct {
		name   string
		form   url.Values
		status int
		want   string
	}{
		{"an approval of the batch that waits is requested", url.Values{"action": {"approve"}, "batch": {"2"}}, http.StatusOK, "Approval of batch 2 requested"},
		{"a pause is requested", url.Values{"action": {"pause"}}, http.StatusOK, "Pause requested"},
		{"a resume is requested", url.Values{"action": {"resume"}}, http.StatusOK, "Resume requested"},
		{"an unknown action is refused naming the actions", url.Values{"action": {"delete"}}, http.StatusBadRequest, "action must be pause, resume or approve"},
		{"a batch on a pause is refused", url.Values{"action": {"pause"}, "batch": {"2"}}, http.StatusBadRequest, "batch is only for approve"},
		{"a batch that is not a number is refused", url.Values{"action": {"approve"}, "batch": {"two"}}, http.StatusBadRequest, "a whole number, 1 or more"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.form.Set("csrf", token)
			status, _, body := admin.post(base+page+"/rollout", tc.form, base)
			if status != tc.status || !strings.Contains(body, tc.want) {
				t.Errorf("status %d, want %d with %q\n%s", status, tc.status, tc.want, body)
			}
		})
	}
	t.Run("a request without the CSRF token is refused", func(t *testing.T) {
		if status, _, _ := admin.post(base+page+"/rollout", url.Values{"action": {"pause"}}, base); status != http.StatusForbidden {
			t.Errorf("status %d, want 403", status)
		}
	})
	t.Run("a fleet-viewer's request goes to the API server, which refuses it", func(t *testing.T) {
		viewer := newBrowser(t, base)
		signInMock(t, viewer, base, dashboard.RoleViewer)
		_, _, body := viewer.get(base + page)
		if strings.Contains(body, `action="`+page+`/rollout"`) {
			t.Error("the page offers the rollout controls to a fleet-viewer")
		}
		status, _, body := viewer.post(base+page+"/rollout", url.Values{"csrf": {csrf(t, body)}, "action": {"approve"}, "batch": {"2"}}, base)
		if status != http.StatusForbidden || !strings.Contains(body, "The Kubernetes API server refused this request, made as mock-viewer") {
			t.Errorf("status %d, want 403 from the (mock) API server\n%s", status, body)
		}
	})
}

package dev_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// dashboard is a signed-in session on the dashboard fleet dev printed: an
// HTTP client with a cookie jar that follows redirects, as a browser does.
type dashboard struct {
	t    *testing.T
	base string
	c    *http.Client
}

// signInDashboard signs in on the dashboard of p with the user and
// password fleet dev printed, through the development provider's login
// form, as a browser does (TestFleetDevServesTheDashboardAndItsPrintedLoginSignsIn
// checks each step).
func signInDashboard(t *testing.T, ctx context.Context, p *devProc) *dashboard {
	t.Helper()
	base, login := reDashboard.FindStringSubmatch(p.out), reDashLogin.FindStringSubmatch(p.out)
	if base == nil || login == nil {
		t.Fatalf("fleet dev printed no dashboard address or login:\n%s", p.out)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &dashboard{t: t, base: base[1], c: &http.Client{Jar: jar, Timeout: time.Minute}}
	status, at, body := d.do(ctx, http.MethodGet, d.base+"/deployments", nil)
	id := reLoginForm.FindStringSubmatch(body)
	if status != http.StatusOK || id == nil {
		t.Fatalf("the provider's login form: %d at %s\n%s", status, at, body)
	}
	u, err := url.Parse(at)
	if err != nil {
		t.Fatal(err)
	}
	form := url.Values{"authRequestID": {id[1]}, "username": {login[1]}, "password": {login[2]}}
	if status, at, body := d.do(ctx, http.MethodPost, u.Scheme+"://"+u.Host+u.Path, form); status != http.StatusOK || !strings.HasPrefix(at, d.base) {
		t.Fatalf("signing in as %s: %d at %s\n%s", login[1], status, at, body)
	}
	return d
}

// page fetches a page of the dashboard and returns its status and body.
func (d *dashboard) page(ctx context.Context, path string) (int, string) {
	d.t.Helper()
	status, _, body := d.do(ctx, http.MethodGet, d.base+path, nil)
	return status, body
}

// pageShowing polls a page of the dashboard until it answers 200 with
// every one of want, for at most within: the dashboard reads Deployments
// from its own cache of the API, which follows a write a moment after a
// kubectl wait on the API saw it. It returns false and the page's main
// part (what a failure should show) when within passed first.
func (d *dashboard) pageShowing(ctx context.Context, path string, within time.Duration, want ...string) (bool, string) {
	d.t.Helper()
	var status int
	var page string
	err := testenv.Poll(ctx, within, func() bool {
		status, page = d.page(ctx, path)
		if status != http.StatusOK {
			return false
		}
		for _, w := range want {
			if !strings.Contains(page, w) {
				return false
			}
		}
		return true
	})
	if err == nil {
		return true, ""
	}
	if i, j := strings.Index(page, "<main"), strings.LastIndex(page, "</main>"); i >= 0 && j > i {
		page = page[i : j+len("</main>")]
	}
	return false, fmt.Sprintf("status %d after %s (%v):\n%s", status, within, err, page)
}

// do sends a request (a form when form is set) and returns the status, the
// final URL after redirects and the body.
func (d *dashboard) do(ctx context.Context, method, u string, form url.Values) (int, string, string) {
	d.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		d.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := d.c.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Request.URL.String(), string(b)
}

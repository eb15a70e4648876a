package dev_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"
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

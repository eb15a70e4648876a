package dev_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

var (
	reDashboard   = regexp.MustCompile(`(?m)^\s*dashboard\s+(http://\S+)`)
	reDashSignIn  = regexp.MustCompile(`(?m)^\s*sign in as (\S+), password (\S+)`)
	reAuthRequest = regexp.MustCompile(`name="authRequestID" value="([^"]+)"`)
	reLoginAction = regexp.MustCompile(`<form method="post" action="([^"]+)"`)
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
// form, as a browser does.
func signInDashboard(t *testing.T, ctx context.Context, p *devProc) *dashboard {
	t.Helper()
	base, user := reDashboard.FindStringSubmatch(p.out), reDashSignIn.FindStringSubmatch(p.out)
	if base == nil || user == nil {
		t.Fatalf("fleet dev printed no dashboard address or sign-in:\n%s", p.out)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	d := &dashboard{t: t, base: strings.TrimSuffix(base[1], "/"), c: &http.Client{Jar: jar, Timeout: time.Minute}}
	status, final, body := d.do(ctx, http.MethodGet, d.base+"/deployments", nil)
	id, action := reAuthRequest.FindStringSubmatch(body), reLoginAction.FindStringSubmatch(body)
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
	form := url.Values{"authRequestID": {id[1]}, "username": {user[1]}, "password": {user[2]}}
	if status, final, body := d.do(ctx, http.MethodPost, target.String(), form); status != http.StatusOK || !strings.HasPrefix(final, d.base) {
		t.Fatalf("signing in as %s: %d at %s\n%s", user[1], status, final, body)
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

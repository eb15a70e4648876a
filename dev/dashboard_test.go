package dev_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

var (
	reDashboard  = regexp.MustCompile(`(?m)^  dashboard          (http://127\.0\.0\.1:\d+)   \(loopback only`)
	reDashLogin  = regexp.MustCompile(`(?m)^ +sign in as (\S+), password (\S+)   \(new every run; also in (\S+)\)$`)
	reLoginForm  = regexp.MustCompile(`name="authRequestID" value="([^"]+)"`)
	reDashViewer = regexp.MustCompile(`(?m)^ +(\S+) has the read-only fleet-viewer role \(sees every page, no action\): password in (\S+)$`)
)

func TestFleetDevServesTheDashboardAndItsPrintedLoginSignsIn(t *testing.T) {
	needKube(t)
	dir := t.TempDir()
	p := startDev(t, dir, "--devices", "1", "--runtime", "sim")
	defer p.stop(t)
	d, l := reDashboard.FindStringSubmatch(p.out), reDashLogin.FindStringSubmatch(p.out)
	if d == nil || l == nil {
		t.Fatalf("fleet dev prints no dashboard URL and login:\n%s", p.out)
	}
	base, user, password, file := d[1], l[1], l[2], l[3]
	if file != filepath.Join(dir, "secrets", "dashboard.password") {
		t.Errorf("the password file is %s, want <data>/secrets/dashboard.password", file)
	}
	if b, err := os.ReadFile(file); err != nil || strings.TrimSpace(string(b)) != password {
		t.Errorf("the password file does not hold the printed password (%v)", err)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Jar: jar, Timeout: time.Minute}
	read := func(resp *http.Response, err error) (int, string, string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Request.URL.String(), string(b)
	}
	_, at, body := read(c.Get(base + "/devices"))
	id := reLoginForm.FindStringSubmatch(body)
	if id == nil {
		t.Fatalf("the dashboard did not lead to the provider's login form (at %s):\n%s", at, body)
	}
	u, _ := url.Parse(at)
	status, _, body := read(c.PostForm(u.Scheme+"://"+u.Host+u.Path, url.Values{"authRequestID": {id[1]}, "username": {user}, "password": {password}}))
	if status != http.StatusOK || !strings.Contains(body, "Signed in as <strong>"+user+"</strong>") {
		t.Fatalf("signing in with the printed login: %d\n%s", status, body)
	}
	testenv.Eventually(t, "sim-1 on the dashboard's device list", time.Minute, func() bool {
		_, _, body := read(c.Get(base + "/devices"))
		return strings.Contains(body, `href="/devices/sim-1"`)
	})
	if strings.Contains(p.stderr.String(), password) {
		t.Error("fleet dev's logs contain the dashboard password")
	}

	// The printed viewer signs in, sees the devices and no action.
	v := reDashViewer.FindStringSubmatch(p.out)
	if v == nil {
		t.Fatalf("fleet dev prints no viewer:\n%s", p.out)
	}
	if v[2] != filepath.Join(dir, "secrets", "dashboard-viewer.password") {
		t.Errorf("the viewer's password file is %s, want <data>/secrets/dashboard-viewer.password", v[2])
	}
	vb, err := os.ReadFile(v[2])
	if err != nil {
		t.Fatal(err)
	}
	vjar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	c = &http.Client{Jar: vjar, Timeout: time.Minute}
	_, at, body = read(c.Get(base + "/devices"))
	if id = reLoginForm.FindStringSubmatch(body); id == nil {
		t.Fatalf("the dashboard did not lead the viewer to the provider's login form (at %s):\n%s", at, body)
	}
	u, _ = url.Parse(at)
	status, _, body = read(c.PostForm(u.Scheme+"://"+u.Host+u.Path, url.Values{"authRequestID": {id[1]}, "username": {v[1]}, "password": {strings.TrimSpace(string(vb))}}))
	if status != http.StatusOK || !strings.Contains(body, "Signed in as <strong>"+v[1]+"</strong>") {
		t.Fatalf("the viewer signing in: %d\n%s", status, body)
	}
	testenv.Eventually(t, "sim-1 on the viewer's device list", time.Minute, func() bool {
		_, _, body := read(c.Get(base + "/devices"))
		return strings.Contains(body, `href="/devices/sim-1"`)
	})
	status, _, body = read(c.Get(base + "/devices/sim-1"))
	if status != http.StatusOK || strings.Contains(body, `action="/devices/sim-1/`) {
		t.Errorf("the viewer's device page: %d, want 200 without the quarantine, release and command forms:\n%s", status, body)
	}
}

package dashboard_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/dashboard"
)

// browser is an http.Client with a cookie jar that follows redirects, as a
// browser does, and sends the Origin header a browser sends with a form.
type browser struct {
	t      *testing.T
	c      *http.Client
	origin string
}

func newBrowser(t *testing.T, origin string) *browser {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, c: &http.Client{Jar: jar, Timeout: 60 * time.Second}, origin: origin}
}

// get fetches u and returns the status, the final URL and the body.
func (b *browser) get(u string) (int, string, string) {
	b.t.Helper()
	resp, err := b.c.Get(u)
	if err != nil {
		b.t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Request.URL.String(), string(body)
}

// post submits a form to u with the browser's Origin (origin "" sends
// none).
func (b *browser) post(u string, form url.Values, origin string) (int, string, string) {
	b.t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("POST %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Request.URL.String(), string(body)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the synchronizer token of a page's forms.
func csrf(t *testing.T, body string) string {
	t.Helper()
	m := csrfField.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("the page has no CSRF token:\n%s", body)
	}
	return m[1]
}

// serve runs a dashboard server with o (PublicURL set to the listener's
// address when empty) until the test ends.
func serve(t *testing.T, o dashboard.Options) (*dashboard.Server, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if o.PublicURL == "" {
		o.PublicURL = "http://" + ln.Addr().String()
	}
	srv, err := dashboard.New(o)
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return srv, o.PublicURL
}

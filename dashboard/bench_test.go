package dashboard_test

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/dashboard"
	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
)

// BenchmarkPages measures the server time of the main pages over a mock fleet
// of 10,000 devices: the read model, the template and the session check.
func BenchmarkPages(b *testing.B) {
	view := fleetview.Mock(1, 10000)
	o := dashboard.Options{SessionKey: make([]byte, dashboard.SessionKeySize), Mock: true, MockSignIn: true, View: view,
		Actions: dashboard.NewMockActions(), Acks: dashboard.NewMemoryAcks(), PublicURL: "http://127.0.0.1:8080"}
	srv, err := dashboard.New(o)
	if err != nil {
		b.Fatal(err)
	}
	h := srv.Handler()
	login := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080/login/mock", strings.NewReader("role=fleet-admin"))
	login.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	login.Header.Set("Origin", "http://127.0.0.1:8080")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, login)
	cookie := rec.Result().Cookies()[0]
	get := func(path string) string {
		req := httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080"+path, nil)
		req.AddCookie(cookie)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("GET %s: %d", path, rec.Code)
		}
		return rec.Body.String()
	}
	first := func(re string, body string) string {
		m := regexp.MustCompile(re).FindStringSubmatch(body)
		if m == nil {
			b.Fatalf("no match of %s", re)
		}
		return m[1]
	}
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"devices", "/devices"},
		{"devices-selector-search", "/devices?selector=canary%3Dtrue&q=a&offset=50"},
		{"device", first(`href="(/devices/[^"?]+)"`, get("/devices"))},
		{"deployments", "/deployments"},
		{"deployment", first(`href="(/deployments/[^"]+/[^"]+)"`, get("/deployments"))},
		{"alerts", "/alerts"},
	}
	for _, p := range pages {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				get(p.path)
			}
		})
	}
}

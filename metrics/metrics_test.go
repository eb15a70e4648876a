package metrics_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/metrics"
)

func TestTheServerServesEachGathererOnItsPathAndStopsWithItsContext(t *testing.T) {
	a, b := metrics.NewRegistry(), prometheus.NewRegistry()
	ca := prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_test_a_total", Help: "a"})
	cb := prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_test_b_total", Help: "b"})
	a.MustRegister(ca)
	b.MustRegister(cb)
	ca.Add(3)
	srv, err := metrics.Listen("127.0.0.1:0", map[string]prometheus.Gatherer{metrics.Path: a, "/metrics/b": b})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	get := func(path string) string {
		t.Helper()
		var body string
		err := testenv.Poll(t.Context(), 30*time.Second, func() bool {
			resp, err := http.Get(srv.URL(path))
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
			return resp.StatusCode == http.StatusOK
		})
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		return body
	}
	for _, tc := range []struct {
		name, path, want, notWant string
	}{
		{"the binary's path has its own metrics and the Go runtime's", metrics.Path, "fleet_test_a_total 3", "fleet_test_b_total"},
		{"the binary's path has the process collector", metrics.Path, "go_goroutines", ""},
		{"another path has only its gatherer's", "/metrics/b", "fleet_test_b_total 0", "fleet_test_a_total"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := get(tc.path)
			if !strings.Contains(body, tc.want) || (tc.notWant != "" && strings.Contains(body, tc.notWant)) {
				t.Errorf("GET %s: want %q and not %q in:\n%s", tc.path, tc.want, tc.notWant, body)
			}
		})
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after its context ended = %v, want nil", err)
	}
	if _, err := http.Get(srv.URL(metrics.Path)); err == nil {
		t.Error("the server still answers after Run returned")
	}
}

func TestListenRefusesWhatCannotBeServed(t *testing.T) {
	g := prometheus.NewRegistry()
	for _, tc := range []struct {
		name  string
		addr  string
		paths map[string]prometheus.Gatherer
		want  string
	}{
		{"no path", "127.0.0.1:0", nil, "no path"},
		{"a path without its slash", "127.0.0.1:0", map[string]prometheus.Gatherer{"metrics": g}, `path "metrics"`},
		{"an address that does not parse", "not-an-address", map[string]prometheus.Gatherer{metrics.Path: g}, "listen on not-an-address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, err := metrics.Listen(tc.addr, tc.paths)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Listen = %v, %v; want an error with %q", srv, err, tc.want)
			}
		})
	}
}

func TestDescribeNamesEveryFamilyWithItsLabels(t *testing.T) {
	fams, err := metrics.Describe(
		prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_b_total", Help: `b "quoted", {braced}`}, []string{"z", "a"}),
		prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_a", Help: "a", ConstLabels: prometheus.Labels{"device": "d1"}}),
	)
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 2 {
		t.Fatalf("Describe = %+v, want 2 families", fams)
	}
	a, b := fams[0], fams[1]
	if a.Name != "fleet_a" || len(a.Labels) != 0 || a.Help != "a" {
		t.Errorf("first family %+v, want fleet_a without variable labels", a)
	}
	if b.Name != "fleet_b_total" || !slices.Equal(b.Labels, []string{"a", "z"}) || b.Help != `b "quoted", {braced}` {
		t.Errorf("second family %+v, want fleet_b_total with labels [a z] and its help as written", b)
	}
}

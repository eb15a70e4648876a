package dev_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// metricSum scrapes url (Prometheus text format) and sums the samples of
// name whose labels include every pair of want (for a histogram, name is
// e.g. x_count). ok is false when no sample matched.
func metricSum(t *testing.T, ctx context.Context, url, name string, want map[string]string) (sum float64, ok bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %s %v", url, resp.Status, err)
	}
lines:
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		series, value, found := strings.Cut(line, " ")
		metric, labels, _ := strings.Cut(series, "{")
		if !found || metric != name {
			continue
		}
		for k, v := range want {
			if !strings.Contains(labels, k+`="`+v+`"`) {
				continue lines
			}
		}
		f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		if err != nil {
			t.Fatalf("scrape %s: %q: %v", url, line, err)
		}
		sum, ok = sum+f, true
	}
	return sum, ok
}

// rolloutFigures are the figures of a rollout in fleet dev's three
// endpoints.
type rolloutFigures struct {
	succeeded, started  float64 // the Deployment's rollout transitions
	revisions           float64 // revisions appended
	allowed             float64 // devices and components authorised
	passes, intentReads float64 // every agent's
}

func figures(t *testing.T, ctx context.Context, base, namespace, name string) rolloutFigures {
	t.Helper()
	dep := map[string]string{"namespace": namespace, "deployment": name}
	var f rolloutFigures
	f.succeeded, _ = metricSum(t, ctx, base+"/operator", "fleet_rollout_transitions_total", with(dep, "type", "rollout.succeeded"))
	f.started, _ = metricSum(t, ctx, base+"/operator", "fleet_rollout_transitions_total", with(dep, "type", "rollout.started"))
	f.revisions, _ = metricSum(t, ctx, base+"/operator", "fleet_operator_revisions_total", map[string]string{"result": "appended"})
	f.allowed, _ = metricSum(t, ctx, base+"/authcallout", "fleet_authcallout_authorizations_total", map[string]string{"result": "allowed"})
	f.passes, _ = metricSum(t, ctx, base+"/agents", "fleet_agent_pass_duration_seconds_count", nil)
	f.intentReads, _ = metricSum(t, ctx, base+"/agents", "fleet_agent_intent_reads_total", map[string]string{"result": "ok"})
	return f
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

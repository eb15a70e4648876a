package dashboard_test

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/dashboard"
	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// noCache is the informer cache of a View whose pages under test read the
// streams only: every list fails.
type noCache struct{ client.Reader }

func (noCache) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("no cache in this test")
}

// TestTheExposureSearchListsTheDevicesFromTheStreams stores two revisions
// of lab/api (the second rolled back on d2) as the operator and the agents
// do, and searches the dashboard's exposure page as an admin.
func TestTheExposureSearchListsTheDevicesFromTheStreams(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	write := func(keys events.Keys, d events.Data, uid string, gen int64) {
		t.Helper()
		ev, err := events.New(keys, d, events.WithCorrelation(uid, gen))
		if err != nil {
			t.Fatal(err)
		}
		natstest.Write(t, ctx, st, ev)
	}
	rev := func(gen int64, image string) events.DeploymentRevisionCreated {
		r := events.DeploymentRevisionCreated{UID: "u1", Generation: gen, RevisionID: "r" + string(rune('0'+gen)), ScoreDigest: "sha256:s",
			Score:   json.RawMessage(`{"type":"PodmanV0","data":{"services":[{"name":"api","image":"` + image + `"}]}}`),
			Targets: []string{"d1", "d2"}, Canaries: []string{"d1"}}
		write(events.Keys{Namespace: "lab", Name: "api"}, r, "u1", gen)
		return r
	}
	report := func(dev string, r events.DeploymentRevisionCreated, phase events.WorkloadPhase) {
		write(events.Keys{Device: dev}, events.WorkloadStatus{Namespace: "lab", Deployment: "api", UID: r.UID, Generation: r.Generation,
			RevisionID: r.RevisionID, Phase: phase, Since: time.Now().UTC()}, r.UID, r.Generation)
	}
	g1 := rev(1, "registry.example.com/api:v1")
	report("d1", g1, events.WorkloadConverged)
	report("d2", g1, events.WorkloadConverged)
	g2 := rev(2, "registry.example.com/api:v2")
	report("d2", g2, events.WorkloadFailed)
	report("d2", g1, events.WorkloadConverged)

	view, err := fleetview.NewLive(fleetview.Options{Cache: noCache{}, Streams: st})
	if err != nil {
		t.Fatal(err)
	}
	o, _ := mockOptions(t, nil)
	o.View = view
	_, base := serve(t, o)
	b := newBrowser(t, base)
	// Sign in back to this page: the overview reads the cache this test
	// has not.
	if status, _, body := b.post(base+"/login/mock", url.Values{"role": {dashboard.RoleAdmin}, "return": {"/exposure"}}, base); status != http.StatusOK {
		t.Fatalf("after mock sign-in: %d\n%s", status, body)
	}
	tests := []struct {
		name  string
		query url.Values
		want  []string
	}{
		{"without a query the form alone", nil, []string{`<form method="get" action="/exposure"`}},
		{"v1 lists both devices and d2's two intervals", url.Values{"image": {"registry.example.com/api:v1"}},
			[]string{"2 devices, 3 intervals (2 still running)", `href="/devices/d1"`, `href="/devices/d2"`, "replaced (generation 2)"}},
		{"v2 lists the device rolled back", url.Values{"image": {"registry.example.com/api:v2"}},
			[]string{"1 devices, 1 intervals (0 still running)", "rolled-back (generation 1)", "Failed (failed)"}},
		{"an image nothing ran says so", url.Values{"image": {"registry.example.com/api:v9"}}, []string{"No recorded revision matches this query."}},
		{"a query's text is shown escaped", url.Values{"image": {"x<script>alert(1)</script>"}, "deployment": {"lab/api"}},
			[]string{"No recorded revision matches this query.", `value="x&lt;script&gt;alert(1)&lt;/script&gt;"`}},
		{"an invalid query names the fix", url.Values{"image": {"api v1"}}, []string{"Invalid query", "no spaces"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			status, _, body := b.get(base + "/exposure?" + tc.query.Encode())
			if status != http.StatusOK && !strings.Contains(body, "Invalid query") {
				t.Fatalf("status %d\n%s", status, body)
			}
			for _, w := range tc.want {
				if !strings.Contains(body, w) && !strings.Contains(html.UnescapeString(body), w) {
					t.Errorf("the page lacks %q:\n%s", w, body)
				}
			}
			if strings.Contains(body, "<script>alert") {
				t.Error("the query's text reached the page unescaped")
			}
		})
	}
}

func TestTheMockExposureSearchRendersTheMocksDevices(t *testing.T) {
	o, _ := mockOptions(t, nil)
	_, base := serve(t, o)
	b := newBrowser(t, base)
	signInMock(t, b, base, dashboard.RoleAdmin)
	status, _, body := b.get(base + "/exposure?image=registry.nationtech.io/telemetry-collector")
	if status != http.StatusOK || !strings.Contains(body, "fleet/telemetry-collector") || !strings.Contains(body, `href="/devices/`) ||
		!strings.Contains(body, "running") {
		t.Errorf("status %d\n%s", status, body)
	}
}

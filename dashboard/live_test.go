package dashboard_test

import (
	"bufio"
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/dashboard"
)

func TestTheLiveStreamSendsAChangeForThePageItFollows(t *testing.T) {
	o, _ := mockOptions(t, nil)
	_, base := serve(t, o)
	b := newBrowser(t, base)
	signInMock(t, b, base, dashboard.RoleAdmin)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/live?page=overview", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("status %d, content type %q", resp.StatusCode, ct)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if sc.Text() == "event: change" {
			return
		}
	}
	t.Fatalf("no change event within a minute (%v)", sc.Err())
}

func TestTheLiveStreamNeedsASession(t *testing.T) {
	o, _ := mockOptions(t, nil)
	_, base := serve(t, o)
	resp, err := http.Get(base + "/live?page=overview")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("status %d, want 401", resp.StatusCode)
	}
}

var deploymentRow = regexp.MustCompile(`<a href="(/deployments/[^"]+)">[^<]+</a></th>\s*<td><span class="phase phase-([A-Za-z]*)">`)

func TestADeploymentPageRefreshesItselfWithoutJavaScriptOnlyWhileItsRolloutRuns(t *testing.T) {
	o, _ := mockOptions(t, nil)
	_, base := serve(t, o)
	b := newBrowser(t, base)
	signInMock(t, b, base, dashboard.RoleAdmin)
	_, _, list := b.get(base + "/deployments")
	seen := map[bool]bool{}
	for _, m := range deploymentRow.FindAllStringSubmatch(list, -1) {
		running := m[2] != "Succeeded" && m[2] != "Failed"
		_, _, body := b.get(base + m[1])
		refresh := strings.Contains(body, `<noscript><meta http-equiv="refresh" content="3"></noscript>`)
		if refresh != running {
			t.Errorf("%s in phase %q: self-refresh %v", m[1], m[2], refresh)
		}
		if !strings.Contains(body, `<a href="`+m[1]+`">Refresh this page</a>`) {
			t.Errorf("%s has no Refresh link", m[1])
		}
		seen[running] = true
	}
	if !seen[true] || !seen[false] {
		t.Fatalf("the mock has no Deployment with a running rollout and one without (%v):\n%s", seen, list)
	}
}

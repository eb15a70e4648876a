package dashboard_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/dashboard"
	chromium "github.com/nationtech/harmony-fleet/internal/testenv/browser"
)

var returnField = regexp.MustCompile(`name="return" value="([^"]*)"`)

// mockLocation submits the mock sign-in form with the return field ret,
// as a browser on base would, and returns the Location the dashboard
// answers with (read off the wire: no redirect is followed).
func mockLocation(t *testing.T, base, ret string) (string, error) {
	t.Helper()
	form := url.Values{"role": {dashboard.RoleAdmin}, "return": {ret}}
	req, err := http.NewRequest(http.MethodPost, base+"/login/mock", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return "", fmt.Errorf("POST /login/mock with return %q: %w", ret, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		return "", fmt.Errorf("POST /login/mock with return %q: status %d, want 303", ret, resp.StatusCode)
	}
	return resp.Header.Get("Location"), nil
}

func TestTheMockSignInSendsTheBrowserBackOnlyToTheDashboard(t *testing.T) {
	o, _ := mockOptions(t, nil)
	_, base := serve(t, o)
	b := newBrowser(t, base)
	for _, tc := range dashboard.ReturnCases("evil.example") {
		t.Run(tc.Name, func(t *testing.T) {
			status, _, body := b.get(base + "/login?return=" + url.QueryEscape(tc.Return))
			m := returnField.FindStringSubmatch(body)
			if status != http.StatusOK || m == nil {
				t.Fatalf("the mock sign-in page: %d, no return field\n%s", status, body)
			}
			if got := htmlUnescape(m[1]); got != tc.Want {
				t.Errorf("the form's return field is %q, want %q", got, tc.Want)
			}
			loc, err := mockLocation(t, base, tc.Return)
			if err != nil {
				t.Fatal(err)
			}
			if loc != tc.Want {
				t.Errorf("after the mock sign-in, Location: %q, want %q", loc, tc.Want)
			}
		})
	}
}

// TestChromiumStaysOnTheDashboardAfterSignIn has Debian's Chromium resolve
// every Location the mock sign-in answers for the return suite (aimed at a
// second server standing in for the attacker's), and follow a real 303
// with it for the reported case and every kept path: the browser must stay
// on the origin that answered.
func TestChromiumStaysOnTheDashboardAfterSignIn(t *testing.T) {
	o, _ := mockOptions(t, nil)
	_, base := serve(t, o)
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "<!doctype html><title>Evil</title><h1>evil</h1>")
	}))
	t.Cleanup(evil.Close)
	evilHost := strings.TrimPrefix(evil.URL, "http://")
	cases := dashboard.ReturnCases(evilHost)
	locs := make([]string, len(cases))
	for i, tc := range cases {
		loc, err := mockLocation(t, base, tc.Return)
		if err != nil {
			t.Errorf("%s: %v", tc.Name, err)
		}
		locs[i] = loc
	}

	br := chromium.Start(t)
	p := br.NewPage(t)
	p.Open(base + "/healthz")
	js, err := json.Marshal(locs)
	if err != nil {
		t.Fatal(err)
	}
	// Chromium's own URL parser, as it resolves a Location header against
	// the page that answered it.
	got := chromium.Eval[[]string](p, `(() => `+string(js)+`.map(l => {
		try { return new URL(l, location.origin).href } catch (e) { return "unparsable: " + e.message }
	}))()`)
	if len(got) != len(cases) {
		t.Fatalf("Chromium resolved %d Locations, want %d", len(got), len(cases))
	}
	for i, tc := range cases {
		u, err := url.Parse(got[i])
		if err != nil || u.Scheme+"://"+u.Host != base {
			t.Errorf("%s: return %q, Location %q: Chromium goes to %q, off the dashboard %s", tc.Name, tc.Return, locs[i], got[i], base)
			continue
		}
		if got[i] != base+tc.Want {
			t.Errorf("%s: return %q, Location %q: Chromium goes to %q, want %q", tc.Name, tc.Return, locs[i], got[i], base+tc.Want)
		}
	}

	// Real redirects: a server on another origin answers a top-level GET
	// with 303 and each Location above (as /callback does after the
	// provider's form), and Chromium follows it. The dashboard's own pages
	// are left out here: their Content-Security-Policy (form-action 'self')
	// would stop a form's redirect off the origin before Chromium lands.
	replay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if i, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/redirect/")); err == nil && i >= 0 && i < len(locs) {
			w.Header()["Location"] = []string{locs[i]}
			w.WriteHeader(http.StatusSeeOther)
			return
		}
		fmt.Fprint(w, "<!doctype html><title>Landed</title><h1>landed</h1>")
	}))
	t.Cleanup(replay.Close)
	for i, tc := range cases {
		if tc.Want == "/" && tc.Return != "/\t/"+evilHost+"/x" {
			continue // the reported case, and every path that is kept
		}
		t.Run("Chromium follows the Location: "+tc.Name, func(t *testing.T) {
			q := br.NewPage(t)
			q.Open(replay.URL + "/redirect/" + strconv.Itoa(i))
			if landed := q.URL(); landed != replay.URL+tc.Want {
				t.Errorf("return %q, Location %q: Chromium is at %s, want %s", tc.Return, locs[i], landed, replay.URL+tc.Want)
			}
		})
	}

	// The mock sign-in form in Chromium: the return rides in its hidden
	// field and the 303 brings the browser back to it.
	t.Run("the mock sign-in form in Chromium brings the browser back to the path", func(t *testing.T) {
		const ret = "/deployments/lab/x?tab=plan#events"
		q := br.NewPage(t)
		q.Open(base + "/login?return=" + url.QueryEscape(ret))
		q.ClickAndWaitLoad(`form[action="/login/mock"] button[type=submit]`)
		if landed := q.URL(); landed != base+ret {
			t.Errorf("after signing in with return %q, Chromium is at %s, want %s", ret, landed, base+ret)
		}
	})
}

package dashboardui

import (
	"net/http"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/testenv/browser"
)

// TestTheExposureSearchPassesAxe opens the mock's exposure search, empty
// and with an answer, in Chromium: the form submits the query and both
// pages pass axe-core.
func TestTheExposureSearchPassesAxe(t *testing.T) {
	url := serveMock(t)
	b := browser.Start(t)
	p := b.NewPage(t)
	p.Open(url + "/")
	p.WaitVisible("#role-admin")
	if status := p.ClickAndWaitLoad(`form[action="/login/mock"] button[type=submit]`); status != http.StatusOK {
		t.Fatalf("the mock admin got %d, want 200", status)
	}
	if status := p.Open(url + "/exposure"); status != http.StatusOK {
		t.Fatalf("GET /exposure: %d", status)
	}
	p.CheckAccessibility("the exposure search")
	p.Fill("#image", "registry.nationtech.io/telemetry-collector")
	if status := p.ClickAndWaitLoad(`form[action="/exposure"] button[type=submit]`); status != http.StatusOK {
		t.Fatalf("the search got %d, want 200", status)
	}
	p.WaitVisible(`#h-devices`)
	if n := p.Count(`table a[href^="/devices/"]`); n == 0 {
		t.Errorf("the answer lists no device")
	}
	p.CheckAccessibility("the exposure answer")
}

package dashboardui

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/internal/testenv/browser"
)

// lateSource is the mock fleet with one Deployment the read model does not
// have yet, as the informer cache lacks a Deployment applied a moment ago:
// hidden is how many more reads of it answer ErrNotFound (-1: until
// appear). Its changes are only those the test sends.
type lateSource struct {
	fleetview.Source
	ns, name string
	changes  chan fleetview.Change
	mu       sync.Mutex // guards hidden
	hidden   int
}

func (s *lateSource) Deployment(ctx context.Context, namespace, name string) (fleetview.DeploymentDetail, error) {
	if namespace == s.ns && name == s.name {
		s.mu.Lock()
		hide := s.hidden != 0
		if s.hidden > 0 {
			s.hidden--
		}
		s.mu.Unlock()
		if hide {
			return fleetview.DeploymentDetail{}, fmt.Errorf("Deployment %s/%s: %w: neither in the cache nor in the streams", namespace, name, fleetview.ErrNotFound)
		}
	}
	return s.Source.Deployment(ctx, namespace, name)
}

// appear makes the Deployment readable and sends the change the informer
// sends for it.
func (s *lateSource) appear() {
	s.mu.Lock()
	s.hidden = 0
	s.mu.Unlock()
	s.changes <- fleetview.Change{Pages: []fleetview.PageRef{{Kind: fleetview.PageDeployment, Key: s.ns + "/" + s.name}}}
}

func (s *lateSource) Changes(ctx context.Context) <-chan fleetview.Change {
	out := make(chan fleetview.Change)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case c := <-s.changes:
				select {
				case out <- c:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// TestADeploymentPageOpenedBeforeTheDashboardHasItShowsItOnceItDoes: a
// user who opens a Deployment's page right after kubectl apply, before
// the dashboard's informer cache has the Deployment, gets "Deployment not
// found" (404) and then the Deployment's page without reloading it: the
// not-found page follows the Deployment's live updates. Before, it stayed
// "not found" until reloaded (TestTheDashboardInARealBrowser failed so on
// a loaded machine).
func TestADeploymentPageOpenedBeforeTheDashboardHasItShowsItOnceItDoes(t *testing.T) {
	const ns, name = "fleet", "telemetry-collector" // a Deployment of the mock fleet
	tests := []struct {
		name string
		// hidden: how many reads answer not found (-1: until appear).
		hidden int
		// announce: the Deployment appears after the page's live stream
		// is open, with its change; otherwise it appears between the
		// page's answer and the stream's start, with no change to say so.
		announce bool
	}{
		{"it appears while the page follows its live updates", -1, true},
		{"it appeared before the page's live stream opened", 1, false},
	}
	b := browser.Start(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &lateSource{Source: fleetview.Mock(1, 40), ns: ns, name: name, changes: make(chan fleetview.Change), hidden: tt.hidden}
			url := serveView(t, src)
			p := b.NewPage(t)
			p.SetTimeout(pageTimeout)
			p.Open(url + "/")
			p.WaitVisible("#role-admin")
			if status := p.ClickAndWaitLoad(`form[action="/login/mock"] button[type=submit]`); status != http.StatusOK {
				t.Fatalf("the mock admin got %d, want 200", status)
			}
			if status := p.Open(url + "/deployments/" + ns + "/" + name); status != http.StatusNotFound {
				t.Fatalf("the page of a Deployment the dashboard does not have yet: %d, want 404", status)
			}
			if tt.announce {
				p.WaitText("main h1", "Deployment not found")
				p.WaitText("#live-status", "Live updates on")
				p.CheckAccessibility("the page of a Deployment not found yet")
				src.appear()
			}
			p.WaitText("main h1", "Deployment "+ns+"/"+name)
			p.WaitText(".phase", "Succeeded")
		})
	}
}

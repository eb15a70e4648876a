package dashboard

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
)

// TestTheDeploymentPageRendersFollowersAndDepartures renders the
// Deployment page of a Follow Deployment (ADR 0026): its followers with
// why they joined and its departures with why, escaped; a Frozen
// Deployment's page has no such section.
func TestTheDeploymentPageRendersFollowersAndDepartures(t *testing.T) {
	pages, err := parseTemplates()
	if err != nil {
		t.Fatal(err)
	}
	since := time.Date(2026, 12, 5, 6, 40, 31, 0, time.UTC)
	follow := fleetview.DeploymentDetail{Follow: &fleetview.FollowStage{
		Followers:      []fleetview.FollowerRow{{Device: "pi-2", Reason: "Device created", Change: "role=analyzer<script>", Since: since}},
		Departures:     []fleetview.DepartureRow{{Device: "pi-3", Reason: "labels no longer match the target selector: role=spare (was role=analyzer)"}},
		FollowersTotal: 1, DeparturesTotal: 1}}
	for _, tc := range []struct {
		name        string
		data        fleetview.DeploymentDetail
		want, never []string
	}{
		{"a Follow Deployment lists its followers and departures", follow,
			[]string{"Followers and departures", `href="/devices/pi-2"`, "Device created", "role=analyzer&lt;script&gt;", "2026-12-05 06:40:31 UTC",
				`href="/devices/pi-3"`, "labels no longer match the target selector: role=spare (was role=analyzer)"},
			[]string{"<script>"}},
		{"a follower of a failed revision says which revision it runs", fleetview.DeploymentDetail{Follow: &fleetview.FollowStage{
			Followers: []fleetview.FollowerRow{{Device: "pi-4", Reason: "Device created", Since: since,
				Runs: "generation 1 (1-aaaaaaaa), the last whose rollout succeeded"}}, Departures: []fleetview.DepartureRow{}, FollowersTotal: 1}},
			[]string{`href="/devices/pi-4"`, "Device created; runs generation 1 (1-aaaaaaaa), the last whose rollout succeeded"}, nil},
		{"a Frozen Deployment has no follow section", fleetview.DeploymentDetail{}, nil, []string{"Followers and departures"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := pages["deployment"].Execute(&b, page{Title: "Deployment", Data: tc.data}); err != nil {
				t.Fatal(err)
			}
			html := b.String()
			for _, w := range tc.want {
				if !strings.Contains(html, w) {
					t.Errorf("the page lacks %q", w)
				}
			}
			for _, n := range tc.never {
				if strings.Contains(html, n) {
					t.Errorf("the page has %q", n)
				}
			}
		})
	}
}

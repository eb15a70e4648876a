package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// pullCounter counts the pulls that reach the runtime.
type pullCounter struct {
	runtime.Runtime
	pulls atomic.Int64
}

func (c *pullCounter) Pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	c.pulls.Add(1)
	return c.Runtime.Pull(ctx, ref, auth)
}

// engineNoise is the wrapping of today's engine errors no pull report
// carries.
var engineNoise = []string{"podman:", "initializing source", "pinging container registry", "reading manifest", "\n"}

// TestAFailingPullIsReportedOnceInOneLineOnRealPodman: a pull that fails
// is reported as one line naming the image, the registry and what was
// tried, with one "registry unavailable" at most, and the same text on
// every retry, so retries add no report. The password never shows, in
// reports or logs.
func TestAFailingPullIsReportedOnceInOneLineOnRealPodman(t *testing.T) {
	reg := podmantest.TestRegistry(t)
	const marker = "marker-password-5d1e0c"
	typo := reg.Addr + "/fleet-examples/analysis-apii:v1"
	tests := []struct {
		name       string
		image      string
		pullSecret string
		phase      events.WorkloadPhase
		// prefix and suffix of the report: a resolver's address sits
		// between them.
		prefix, suffix string
	}{
		{"a host name that does not resolve is Pending", "nonexistent.invalid/app:v1", "", events.WorkloadPending,
			"registry unavailable, retrying: image nonexistent.invalid/app:v1 could not be pulled from nonexistent.invalid (anonymously): " +
				"the registry's host name does not resolve (lookup nonexistent.invalid",
			"no such host); check the registry host in the image name"},
		{"the issue's localhost image that was never built is Pending", "localhost/fleet-examples/analysis-apii:v1", "", events.WorkloadPending,
			"registry unavailable, retrying: image localhost/fleet-examples/analysis-apii:v1 could not be pulled from localhost (anonymously): " +
				"the registry refused the connection (dial tcp ",
			"connection refused); check the image name: a localhost/ image is one built or loaded on the device, and this device does not have it"},
		{"a typo in the image name is Failed", typo, "hub", events.WorkloadFailed,
			"preflight: image " + typo + " could not be pulled from " + reg.Addr + " (with the pull secret for " + reg.Addr + "): " +
				"the image does not exist in the registry (manifest unknown); check the image name and tag", ""},
		{"a refused password is Failed and never shown", typo, "wrong", events.WorkloadFailed,
			"preflight: image " + typo + " could not be pulled from " + reg.Addr + " (with the pull secret for " + reg.Addr + "): " +
				"the registry refused the credentials (",
			"); check the pull secret's username and password"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newPodmanWorld(t)
			counter := &pullCounter{Runtime: w.rt}
			var logs testenv.SyncBuffer
			w.r.Runtime = counter
			w.r.Log = slog.New(slog.NewTextHandler(&logs, nil))
			w.r.Credentials = creds{
				"hub":   fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, reg.Addr, reg.Username, reg.Password),
				"wrong": fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, reg.Addr, reg.Username, marker),
			}
			d := w.runDaemon(t, agent.Options{ResyncInterval: 100 * time.Millisecond, HeartbeatInterval: time.Hour,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			d.put(1, score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: tt.image, ImagePullSecret: tt.pullSecret}}}})
			// Passes keep coming (a resync every 100 ms, the retry of an
			// unavailable registry): wait for three pulls of the image.
			if testenv.Poll(w.ctx, time.Minute, func() bool { return counter.pulls.Load() >= 3 && d.reported(1, tt.phase) }) != nil {
				t.Fatalf("%d pulls, reports %+v; want three pulls and a %s report", counter.pulls.Load(), d.reports(1), tt.phase)
			}
			var got []string
			for _, ws := range d.reports(1) {
				if ws.Phase == tt.phase {
					got = append(got, ws.Error)
				}
			}
			if len(got) != 1 {
				t.Fatalf("%d %s reports after %d pulls, want one (the text is the same on every retry): %q", len(got), tt.phase, counter.pulls.Load(), got)
			}
			msg := got[0]
			if !strings.HasPrefix(msg, tt.prefix) || !strings.HasSuffix(msg, tt.suffix) {
				t.Errorf("the report reads\n%q\nwant it to start\n%q\nand end\n%q", msg, tt.prefix, tt.suffix)
			}
			if n := strings.Count(msg, "registry unavailable"); n > 1 || strings.Count(msg, tt.image) != 1 || strings.Contains(msg, "pull "+tt.image) {
				t.Errorf("the report %q repeats itself", msg)
			}
			for _, n := range engineNoise {
				if strings.Contains(msg, n) {
					t.Errorf("the report %q carries the engine's wrapping %q", msg, n)
				}
			}
			if strings.Contains(msg, marker) || strings.Contains(msg, reg.Password) || strings.Contains(logs.String(), marker) ||
				strings.Contains(logs.String(), reg.Password) {
				t.Error("the registry password shows in a report or a log line")
			}
		})
	}
}

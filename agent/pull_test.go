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
			// Every pass pulls again (no wait between retries), each
			// with the chance of a new report.
			w.r.PullBackoff = &agent.PullBackoff{First: time.Nanosecond, Last: time.Nanosecond}
			w.r.Credentials = creds{
				"hub":   fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, reg.Addr, reg.Username, reg.Password),
				"wrong": fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, reg.Addr, reg.Username, marker),
			}
			d := w.runDaemon(t, agent.Options{ResyncInterval: 100 * time.Millisecond, HeartbeatInterval: time.Hour,
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			d.put(1, score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: tt.image, ImagePullSecret: tt.pullSecret}}}})
			// Passes keep coming (a resync every 100 ms, the retry of an
			// unavailable registry): wait for three pulls of the image.
			if testenv.Poll(w.ctx, w.left(), func() bool { return counter.pulls.Load() >= 3 && d.reported(1, tt.phase) }) != nil {
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
			t.Logf("the report: %s", msg)
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

// fakeClock is a clock the test moves.
type fakeClock struct{ now atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time      { return time.Unix(0, c.now.Load()).UTC() }
func (c *fakeClock) Add(d time.Duration) { c.now.Add(int64(d)) }

// waitFor waits for a workload report that ok accepts.
func (e *agentEnv) waitFor(ok func(events.WorkloadStatus) bool) {
	e.t.Helper()
	if testenv.Poll(e.ctx, 20*time.Second, func() bool {
		for _, ws := range e.statuses() {
			if ok(ws) {
				return true
			}
		}
		return false
	}) != nil {
		e.t.Fatalf("no such report; got %+v", e.statuses())
	}
}

// TestAFailedPullIsNotRetriedBeforeItsBackoff: after a failed pull the
// image is not pulled again before 1 s, then 2 s, … up to 1 minute have
// passed; meanwhile a pass fails with the same error (the same report).
// A pull that works, an image that became present, or Forget (the
// reconcile-now command) end the wait.
func TestAFailedPullIsNotRetriedBeforeItsBackoff(t *testing.T) {
	w := newWorld(t)
	clock := newFakeClock()
	counter := &pullCounter{Runtime: w.rt}
	w.r.Runtime = counter
	w.r.PullBackoff = &agent.PullBackoff{Now: clock.Now}
	w.rt.SetRegistryUnavailable(true)
	s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: privateImage, ImagePullSecret: "hub-pull"}}}}
	apply := func() error {
		t.Helper()
		err := w.r.Apply(w.ctx, entry(t, 1, s))
		if _, ok := agent.AsUnavailable(err); !ok && err != nil {
			t.Fatalf("Apply: %v, want the registry unavailable", err)
		}
		return err
	}
	first := apply()
	if first == nil || counter.pulls.Load() != 1 {
		t.Fatalf("Apply = %v after %d pulls; want a failure after one pull", first, counter.pulls.Load())
	}
	pulls := int64(1)
	for _, delay := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		32 * time.Second, time.Minute, time.Minute} {
		clock.Add(delay - time.Millisecond)
		if err := apply(); err == nil || err.Error() != first.Error() {
			t.Fatalf("a pass within the backoff says %v, want the same error as the first: %v", err, first)
		}
		if got := counter.pulls.Load(); got != pulls {
			t.Fatalf("%d pulls %s after the last failure, want %d: the backoff is %s", got, delay-time.Millisecond, pulls, delay)
		}
		clock.Add(time.Millisecond)
		apply()
		pulls++
		if got := counter.pulls.Load(); got != pulls {
			t.Fatalf("%d pulls once %s passed, want %d", got, delay, pulls)
		}
	}

	t.Run("reconcile-now forgets the backoff", func(t *testing.T) {
		w.r.PullBackoff.Forget()
		apply()
		if got := counter.pulls.Load(); got != pulls+1 {
			t.Fatalf("%d pulls after Forget, want %d", got, pulls+1)
		}
		pulls++
	})
	t.Run("an image that became present is used at once", func(t *testing.T) {
		w.rt.AddImage(privateImage)
		if err := w.r.Apply(w.ctx, entry(t, 1, s)); err != nil {
			t.Fatalf("Apply with the image present: %v", err)
		}
		w.rt.RemoveImage(privateImage)
		w.rt.SetRegistryUnavailable(false)
		if err := w.r.Apply(w.ctx, entry(t, 1, s)); err != nil {
			t.Fatalf("Apply after the image was present once: %v (the failure was not forgotten)", err)
		}
	})
}

// stallingRuntime makes pulls of one image wait until released (or their
// context ends), as Podman's own retries of a registry that does not
// answer do, and counts them.
type stallingRuntime struct {
	runtime.Runtime
	image   string
	stall   atomic.Bool
	release chan struct{}
	stalled atomic.Int64
}

func (s *stallingRuntime) Pull(ctx context.Context, ref string, auth *runtime.RegistryAuth) error {
	if ref == s.image && s.stall.Load() {
		s.stalled.Add(1)
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Runtime.Pull(ctx, ref, auth)
}

// TestAStuckPullDoesNotDelayAnotherDeployment: once A's pull has failed,
// the pass applies B, which needs no pull, before A: B's new revision
// converges while A's pull is still stuck in the engine.
func TestAStuckPullDoesNotDelayAnotherDeployment(t *testing.T) {
	clock := newFakeClock()
	stalling := &stallingRuntime{image: "unreachable.example/app:v1", release: make(chan struct{})}
	e := startAgent(t, func(o *agent.Options) {
		stalling.Runtime = o.Reconciler.Runtime
		o.Reconciler.Runtime = stalling
		o.Reconciler.PullBackoff = &agent.PullBackoff{Now: clock.Now}
	})
	t.Cleanup(func() { close(stalling.release) })
	e.world.rt.SetRegistryUnavailable(true)
	a := entry(t, 1, score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "a-api", Image: stalling.image}}}})
	a.Name = "a"
	bEntry := func(gen int64, value string) events.IntentEntry {
		b := entry(t, gen, score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "b-api", Image: "reg.example/api:v1",
			Env: []score.EnvVar{{Name: "V", Value: value}}}}}})
		b.Name = "b"
		return b
	}
	e.put(a, bEntry(1, "1"))
	e.waitFor(func(ws events.WorkloadStatus) bool { return ws.Deployment == "a" && ws.Phase == events.WorkloadPending })
	e.waitFor(func(ws events.WorkloadStatus) bool {
		return ws.Deployment == "b" && ws.Phase == events.WorkloadConverged
	})

	// From now on A's pull is due and hangs in the engine.
	stalling.stall.Store(true)
	clock.Add(time.Hour)
	e.put(a, bEntry(2, "2"))
	e.waitFor(func(ws events.WorkloadStatus) bool {
		return ws.Deployment == "b" && ws.Generation == 2 && ws.Phase == events.WorkloadConverged
	})
	if testenv.Poll(e.ctx, 20*time.Second, func() bool { return stalling.stalled.Load() > 0 }) != nil {
		t.Fatal("A's pull was never retried: the test proves nothing")
	}
}

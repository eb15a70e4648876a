package runtimetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// watchLabel is the label that sets a case's containers apart from the
// other containers carrying Fixture.Labels.
const watchLabel = "io.nationtech.harmony-fleet.conformance-watch"

// watchTimeout bounds the wait for one event (Podman's restart after a
// death may take a while on a loaded host).
const watchTimeout = time.Minute

// watchSpec is spec with the case's own watch label.
func (s *suite) watchSpec(prefix, image, value string) runtime.ContainerSpec {
	spec := s.spec(prefix, image)
	spec.Labels[watchLabel] = value
	return spec
}

// watch watches the containers carrying Fixture.Labels and the case's own
// watch label (value returned); the watch ends with the case.
func (s *suite) watch() (<-chan runtime.ContainerEvent, string) {
	s.t.Helper()
	value := s.name("watch")
	labels := maps.Clone(s.fx.Labels)
	labels[watchLabel] = value
	ctx, cancel := context.WithCancel(s.t.Context())
	s.t.Cleanup(cancel)
	ch, err := s.rt.Watch(ctx, labels)
	if err != nil {
		s.t.Fatalf("Watch: %v", err)
	}
	return ch, value
}

// next returns the next event on ch about id, failing the case on an
// EventLost, a closed channel or a minute without one. Events of other
// containers go to others.
func (s *suite) next(ch <-chan runtime.ContainerEvent, id string, others *[]runtime.ContainerEvent) runtime.ContainerEvent {
	s.t.Helper()
	timeout := time.NewTimer(watchTimeout)
	defer timeout.Stop()
	for {
		select {
		case e, ok := <-ch:
			switch {
			case !ok:
				s.t.Fatalf("the watch's channel was closed while waiting for an event of %s", short(id))
			case e.Kind == runtime.EventLost:
				s.t.Fatalf("the watch lost events while waiting for an event of %s", short(id))
			case e.ID == id:
				return e
			case others != nil:
				*others = append(*others, e)
			}
		case <-timeout.C:
			s.t.Fatalf("no event of %s within %s", short(id), watchTimeout)
		}
	}
}

// expect reads the next event of id and checks its kind (and exit code for
// a death).
func (s *suite) expect(ch <-chan runtime.ContainerEvent, id, name string, kind runtime.EventKind, code int) runtime.ContainerEvent {
	s.t.Helper()
	e := s.next(ch, id, nil)
	if e.Kind != kind || (kind == runtime.EventDied && e.ExitCode != code) || e.Name != name {
		s.t.Fatalf("the watch delivered %+v, want %s of %s (%s) with exit code %d", e, kind, name, short(id), code)
	}
	return e
}

func testWatchDied(s *suite) {
	ch, value := s.watch()
	spec := s.watchSpec("watch-died", s.fx.Exit3, value)
	id := s.run(spec)
	s.expect(ch, id, spec.Name, runtime.EventStart, 0)
	died := s.expect(ch, id, spec.Name, runtime.EventDied, 3)
	if c := s.inspect(id); c.State != runtime.StateExited || c.ExitCode != 3 || c.RestartCount != 0 {
		s.t.Errorf("after the death Inspect reports %s, code %d, %d restarts; want exited, 3, none (policy no)", c.State, c.ExitCode, c.RestartCount)
	}
	if !died.Time.IsZero() && died.Time.Before(time.Now().Add(-time.Hour)) {
		s.t.Errorf("the death is dated %s, an hour or more ago", died.Time)
	}
	if err := s.rt.Remove(s.ctx(), id, false); err != nil {
		s.t.Fatal(err)
	}
	s.expect(ch, id, spec.Name, runtime.EventRemoved, 0)
}

func testWatchLabels(s *suite) {
	ch, value := s.watch()
	unwatched := s.run(s.spec("watch-unwatched", s.fx.Running))
	other := s.watchSpec("watch-other", s.fx.Running, value+"-other")
	otherID := s.run(other)
	spec := s.watchSpec("watch-labels", s.fx.Exit3, value)
	id := s.run(spec)
	var others []runtime.ContainerEvent
	for e := s.next(ch, id, &others); e.Kind != runtime.EventDied; e = s.next(ch, id, &others) {
	}
	for _, e := range others {
		if e.ID == unwatched || e.ID == otherID {
			s.t.Errorf("the watch delivered %s of a container without all its labels", e.Kind)
		}
	}
}

func testWatchClosed(s *suite) {
	ctx, cancel := context.WithCancel(s.t.Context())
	ch, err := s.rt.Watch(ctx, s.fx.Labels)
	if err != nil {
		s.t.Fatalf("Watch: %v", err)
	}
	cancel()
	timeout := time.NewTimer(watchTimeout)
	defer timeout.Stop()
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				if _, err := s.rt.Watch(ctx, s.fx.Labels); err == nil {
					s.t.Error("Watch with an ended context succeeded")
				}
				return
			}
		case <-timeout.C:
			s.t.Fatalf("the channel is open %s after the watch's context ended", watchTimeout)
		}
	}
}

func testPolicyRestart(s *suite) {
	if s.fx.Crashable == "" || s.fx.Crash == nil {
		s.t.Skip("the fixture cannot crash a container")
	}
	ch, value := s.watch()
	spec := s.watchSpec("restart-count", s.fx.Crashable, value)
	spec.RestartPolicy = runtime.RestartUnlessStopped
	id := s.run(spec)
	s.expect(ch, id, spec.Name, runtime.EventStart, 0)
	s.waitState(id, runtime.StateRunning)
	s.fx.Crash(s.t, id)
	s.expect(ch, id, spec.Name, runtime.EventDied, CrashExitCode)
	s.expect(ch, id, spec.Name, runtime.EventStart, 0)
	c := s.waitState(id, runtime.StateRunning)
	if c.RestartCount != 1 || c.ID != id {
		s.t.Errorf("after one crash and the policy's restart Inspect reports %d restarts (ID %s), want 1, the same container", c.RestartCount, short(c.ID))
	}
	if c.OOMKilled {
		s.t.Error("a crash is reported OOM-killed")
	}
	// A Start by the user begins the count again, as after a reboot.
	if err := s.rt.Stop(s.ctx(), id, 10*time.Second); err != nil {
		s.t.Fatal(err)
	}
	if e := s.next(ch, id, nil); e.Kind != runtime.EventDied {
		s.t.Fatalf("after a stop the watch delivered %s, want died", e.Kind)
	}
	if c := s.waitState(id, runtime.StateExited); c.RestartCount != 1 {
		s.t.Errorf("a stop changed the restart count to %d", c.RestartCount)
	}
	s.start(id)
	if c := s.waitState(id, runtime.StateRunning); c.RestartCount != 0 {
		s.t.Errorf("after a Start the restart count is %d, want 0", c.RestartCount)
	}
}

func testLogsTail(s *suite) {
	if s.fx.Prints == "" {
		s.t.Skip("the fixture has no image that prints")
	}
	id := s.run(s.spec("logs", s.fx.Prints))
	want := PrintedLines
	var all []string
	deadline := time.Now().Add(watchTimeout)
	for {
		var err error
		all, err = s.rt.Logs(s.ctx(), id, 0)
		if err != nil {
			s.t.Fatalf("Logs: %v", err)
		}
		if len(all) >= len(want) || time.Now().After(deadline) {
			break
		}
		select { // the container may still be printing: poll, do not guess
		case <-s.t.Context().Done():
			s.t.Fatal("test ended while waiting")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if !slices.Equal(all, want) {
		s.t.Fatalf("Logs(all) = %q, want %q", all, want)
	}
	for _, tail := range []int{1, 2, len(want) + 5} {
		got, err := s.rt.Logs(s.ctx(), id, tail)
		if exp := want[max(0, len(want)-tail):]; err != nil || !slices.Equal(got, exp) {
			s.t.Errorf("Logs(tail %d) = %q, %v; want %q", tail, got, err, exp)
		}
	}
	if _, err := s.rt.Logs(s.ctx(), s.name("missing"), 5); !errors.Is(err, runtime.ErrNotFound) {
		s.t.Errorf("Logs of a missing container: %v, want ErrNotFound", err)
	}
}

func testImageDigest(s *suite) {
	digest := func(image string) string {
		s.t.Helper()
		d := s.inspect(s.create(s.spec("digest", image))).ImageDigest
		if d == "" || d == image || strings.ContainsAny(d, "/:") && !strings.HasPrefix(d, "sha256:") {
			s.t.Fatalf("the digest of %s is %q, want sha256:… or an image ID", image, d)
		}
		return d
	}
	running, again, other := digest(s.fx.Running), digest(s.fx.Running), digest(s.fx.Exit3)
	if running != again {
		s.t.Errorf("two containers of %s report digests %s and %s", s.fx.Running, running, again)
	}
	if running == other {
		s.t.Errorf("%s and %s report the same digest %s", s.fx.Running, s.fx.Exit3, running)
	}
	list, err := s.rt.List(s.ctx())
	if err != nil {
		s.t.Fatal(err)
	}
	for _, c := range list {
		if c.ImageDigest != "" || c.RestartCount != 0 || c.OOMKilled {
			s.t.Errorf("List reports %s with digest %q, %d restarts, OOM %v: those are Inspect's only", c.Name, c.ImageDigest, c.RestartCount, c.OOMKilled)
			break
		}
	}
}

func testWatchHealth(s *suite) {
	ch, value := s.watch()
	spec := s.healthSpec("watch-health", s.fx.HealthFails, 1, 0)
	spec.Labels[watchLabel] = value
	id := s.run(spec)
	s.expect(ch, id, spec.Name, runtime.EventStart, 0)
	s.waitState(id, runtime.StateRunning)
	for range 2 {
		if err := s.rt.RunHealthCheck(s.ctx(), id); err != nil {
			s.t.Fatalf("RunHealthCheck: %v", err)
		}
		// The status in the event may lag one check behind (Podman 4.3):
		// only its presence and its words are the contract.
		e := s.expect(ch, id, spec.Name, runtime.EventHealth, 0)
		if !slices.Contains([]string{runtime.HealthStarting, runtime.HealthHealthy, runtime.HealthUnhealthy}, e.Health) {
			s.t.Errorf("a health event says %q", e.Health)
		}
	}
	if h := s.health(id); h.Status != runtime.HealthUnhealthy {
		s.t.Errorf("after two failed checks of one retry Inspect says %q, want unhealthy", h.Status)
	}
}

package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// canceller cancels a pass at one call, as the daemon does when a newer
// intent arrives: the call named at ("create api", "stop api", "wait
// migrate" …) reaches the engine, then the pass's context ends and the
// call reports the cancellation, as a request whose answer was lost. Each
// Wait is announced on waits.
type canceller struct {
	*recorder
	at     string
	cancel context.CancelFunc
	waits  chan string
}

func newCanceller(rt runtime.Runtime, at string, cancel context.CancelFunc) *canceller {
	return &canceller{recorder: newRecorder(rt), at: at, cancel: cancel, waits: make(chan string, 16)}
}

// after cancels when op on idOrName is the call to cancel at.
func (c *canceller) after(op, idOrName string, err error) error {
	c.mu.Lock()
	name, ok := c.names[idOrName]
	c.mu.Unlock()
	if !ok {
		name = idOrName
	}
	if err != nil || op+" "+name != c.at {
		return err
	}
	c.cancel()
	return fmt.Errorf("%s %s: %w", op, name, context.Canceled)
}

func (c *canceller) Create(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	id, err := c.recorder.Create(ctx, spec)
	return id, c.after("create", id, err)
}

func (c *canceller) Start(ctx context.Context, id string) error {
	return c.after("start", id, c.recorder.Start(ctx, id))
}

func (c *canceller) Stop(ctx context.Context, id string, timeout time.Duration) error {
	return c.after("stop", id, c.recorder.Stop(ctx, id, timeout))
}

func (c *canceller) Remove(ctx context.Context, id string, force bool) error {
	return c.after("remove", id, c.recorder.Remove(ctx, id, force))
}

func (c *canceller) Wait(ctx context.Context, id string) (int, error) {
	c.mu.Lock()
	name := c.names[id]
	c.mu.Unlock()
	c.waits <- name
	if "wait "+name == c.at {
		c.cancel() // the pass ends while it waits
	}
	return c.recorder.Wait(ctx, id)
}

// runningInit is a score whose init container runs until it is told to
// exit (the sim's api image runs until stopped).
func runningInit() score.Score {
	s := baseScore()
	s.Data.InitContainer.Image = "reg.example/api:v2"
	return s
}

func TestACancelledPassLeavesOnlyWhatTheNextPassRepairs(t *testing.T) {
	changed := baseScore()
	changed.Data.Services[0].Image = "reg.example/api:v2"
	tests := []struct {
		name string
		at   string
		// score of the cancelled pass and the next one (generation 2).
		score score.Score
		// kept are containers the cancelled pass left that the next pass
		// must keep (same ID), not replace.
		kept []string
		// exitInit makes the next pass's init container exit 0 once it is
		// waited for.
		exitInit bool
	}{
		{"cancelled after creating a service: the next pass starts that container", "create api", changed, []string{"migrate", "api"}, false},
		{"cancelled after starting a service: the next pass keeps it", "start api", changed, []string{"migrate", "api"}, false},
		{"cancelled after stopping the old service: the next pass removes it and starts the new one", "stop api", changed, []string{"migrate"}, false},
		{"cancelled after removing the old init container: the next pass runs the new one", "remove migrate", changed, nil, false},
		{"cancelled after creating the init container: the next pass starts and waits for that container", "create migrate", changed, []string{"migrate"}, false},
		{"cancelled while waiting for the init container: the next pass waits for the same container", "wait migrate", runningInit(), []string{"migrate"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			if err := w.r.Apply(w.ctx, entry(t, 1, baseScore())); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(w.ctx)
			defer cancel()
			w.r.Runtime = newCanceller(w.rt, tt.at, cancel)
			if err := w.r.Apply(ctx, entry(t, 2, tt.score)); !errors.Is(err, context.Canceled) {
				t.Fatalf("the cancelled pass returned %v, want context.Canceled", err)
			}
			left := w.containers()

			next := newCanceller(w.rt, "", func() {})
			w.r.Runtime = next
			done := make(chan error, 1)
			go func() { done <- w.r.Apply(w.ctx, entry(t, 2, tt.score)) }()
			if tt.exitInit {
				select {
				case name := <-next.waits:
					if name != "migrate" {
						t.Fatalf("the next pass waited for %s", name)
					}
				case err := <-done:
					t.Fatalf("the next pass ended without waiting for the init container: %v", err)
				}
				if err := w.rt.Exit("migrate", 0); err != nil {
					t.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				t.Fatalf("the next pass: %v", err)
			}
			after := w.containers()
			if len(after) != 3 {
				t.Errorf("%d containers after the next pass, want 3 (no duplicate, nothing stale): %v", len(after), after)
			}
			revision := after["api"].Labels[agent.LabelRevision]
			for name, c := range after {
				want := runtime.StateRunning
				if name == "migrate" {
					want = runtime.StateExited
				}
				if c.State != want || c.Labels[agent.LabelRevision] != revision {
					t.Errorf("%s: %s at revision %s, want %s at %s", name, c.State, c.Labels[agent.LabelRevision], want, revision)
				}
			}
			for _, name := range tt.kept {
				if after[name].ID != left[name].ID {
					t.Errorf("%s was replaced; want the container the cancelled pass left", name)
				}
			}
		})
	}
}

func TestAnInitContainerPastItsTimeoutIsStoppedAndRemoved(t *testing.T) {
	w := newWorld(t)
	if err := w.r.Apply(w.ctx, entry(t, 1, baseScore())); err != nil {
		t.Fatal(err)
	}
	before := w.containers()
	w.r.InitTimeout = 50 * time.Millisecond
	err := w.r.Apply(w.ctx, entry(t, 2, runningInit()))
	var te *agent.InitTimeoutError
	if !errors.As(err, &te) || te.Name != "migrate" || te.Timeout != 50*time.Millisecond {
		t.Fatalf("got %v, want an InitTimeoutError for migrate after 50ms", err)
	}
	for _, want := range []string{"migrate", "50ms", "init timeout", "make it finish sooner"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	after := w.containers()
	if _, ok := after["migrate"]; ok {
		t.Error("the init container is still there")
	}
	for _, name := range []string{"api", "worker"} {
		if after[name].ID != before[name].ID || after[name].State != runtime.StateRunning {
			t.Errorf("service %s was touched after the init container timed out", name)
		}
	}
}

func TestATimedOutInitContainerIsRemovedEvenWhenThePassIsCancelledWhileItStops(t *testing.T) {
	w := newWorld(t)
	w.r.InitTimeout = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	w.r.Runtime = newCanceller(w.rt, "stop migrate", cancel)
	err := w.r.Apply(ctx, entry(t, 1, runningInit()))
	var te *agent.InitTimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("got %v, want an InitTimeoutError", err)
	}
	if _, ok := w.containers()["migrate"]; ok {
		t.Error("the stopped init container was left: the next pass could take it for completed")
	}
}

func TestAResumedWaitKeepsTheBoundCountedFromTheInitContainersStart(t *testing.T) {
	w := newWorld(t, func(o *sim.Options) {
		o.Now = func() time.Time { return time.Now().Add(-time.Hour) } // it started an hour ago
	})
	w.r.InitTimeout = time.Minute
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	w.r.Runtime = newCanceller(w.rt, "wait migrate", cancel)
	if err := w.r.Apply(ctx, entry(t, 1, runningInit())); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled pass returned %v", err)
	}
	w.r.Runtime = w.rt
	err := w.r.Apply(w.ctx, entry(t, 1, runningInit()))
	var te *agent.InitTimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("got %v, want an InitTimeoutError at once: the minute since its start has passed", err)
	}
	if _, ok := w.containers()["migrate"]; ok {
		t.Error("the init container is still there")
	}
}

// sleeperFile runs for $SLEEP seconds (an hour by default) and exits 0,
// also on SIGTERM.
const sleeperFile = "CMD [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep ${SLEEP:-3600} & wait\"]\n"

// sleeperScore is a score whose init container sleeps for secs seconds,
// then a service.
func sleeperScore(t *testing.T, w *podmanWorld, secs int) score.Score {
	sleeper := podmantest.BuildImage(t, "sleeper", sleeperFile)
	return score.Score{Data: score.PodmanV0{
		InitContainer: &score.Service{Name: w.name("migrate"), Image: sleeper,
			Env: []score.EnvVar{{Name: "SLEEP", Value: strconv.Itoa(secs)}}},
		Services: []score.Service{{Name: w.name("api"), Image: sleeper}},
	}}
}

func TestAnInitContainerPastItsTimeoutIsStoppedAndRemovedOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	w.r.StopTimeout = 2 * time.Second
	w.r.InitTimeout = 3 * time.Second
	s := sleeperScore(t, w, 3600)
	start := time.Now()
	err := w.r.Apply(w.ctx, w.entry(1, s))
	var te *agent.InitTimeoutError
	if !errors.As(err, &te) || te.Name != w.name("migrate") || te.Timeout != 3*time.Second {
		t.Fatalf("got %v, want an InitTimeoutError for the init container after 3s", err)
	}
	if elapsed := time.Since(start); elapsed < 3*time.Second {
		t.Errorf("the pass ended after %s, before the bound", elapsed)
	}
	cs := w.byName()
	if _, ok := cs[w.name("migrate")]; ok {
		t.Error("the init container is still there")
	}
	if _, ok := cs[w.name("api")]; ok {
		t.Error("the service was created although the init container did not complete")
	}
}

func TestACancelledWaitForTheInitContainerIsResumedOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	w.r.StopTimeout = 2 * time.Second
	w.r.InitTimeout = time.Minute
	s := sleeperScore(t, w, 4)
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	w.r.Runtime = newCanceller(w.rt, "wait "+w.name("migrate"), cancel)
	if err := w.r.Apply(ctx, w.entry(1, s)); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled pass returned %v", err)
	}
	left := w.byName()[w.name("migrate")]
	if left.State != runtime.StateRunning || left.StartedAt.IsZero() {
		t.Fatalf("after the cancelled pass the init container is %+v, want running with its start time", left)
	}
	w.r.Runtime = w.rt
	if err := w.r.Apply(w.ctx, w.entry(1, s)); err != nil {
		t.Fatal(err)
	}
	cs := w.byName()
	if c := cs[w.name("migrate")]; c.ID != left.ID || c.State != runtime.StateExited || c.ExitCode != 0 {
		t.Errorf("init container %+v, want the same container (%s) exited 0: waited for, not restarted", c, left.ID)
	}
	if c := cs[w.name("api")]; c.State != runtime.StateRunning {
		t.Errorf("service %+v", c)
	}
}

func TestAResumedWaitKeepsTheBoundCountedFromTheInitContainersStartOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	w.r.StopTimeout = 2 * time.Second
	w.r.InitTimeout = 15 * time.Second
	s := sleeperScore(t, w, 3600)
	ctx, cancel := context.WithTimeout(w.ctx, 2*time.Second) // the daemon gives up on the pass
	defer cancel()
	if err := w.r.Apply(ctx, w.entry(1, s)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the first pass returned %v", err)
	}
	c := w.byName()[w.name("migrate")]
	if c.State != runtime.StateRunning || c.StartedAt.IsZero() {
		t.Fatalf("the cancelled pass left the init container %s (started %s), want running with a start time", c.State, c.StartedAt)
	}
	// The container outlives its bound while no pass runs. A pass that
	// counts from the container's start stops it at once; one that counted
	// again from the resume would wait the whole bound more. The margin
	// between the two (the bound, 15 s, against a stop of at most 2 s) is
	// what a loaded machine may eat into, not a timing of the product.
	testenv.Eventually(t, "the init container to outlive its bound", testTimeout(t), func() bool {
		return time.Since(c.StartedAt) > w.r.InitTimeout
	})
	start := time.Now()
	err := w.r.Apply(w.ctx, w.entry(1, s))
	var te *agent.InitTimeoutError
	if !errors.As(err, &te) {
		t.Fatalf("got %v, want an InitTimeoutError", err)
	}
	if elapsed := time.Since(start); elapsed >= w.r.InitTimeout {
		t.Errorf("the resumed pass waited %s for a container past its bound: the bound was counted again from the resume, not from the start", elapsed)
	}
}

func TestACancelledPassLeavesOnlyWhatTheNextPassRepairsOnRealPodman(t *testing.T) {
	runs := podmantest.BuildImage(t, "runs", runsFile)
	runs2 := podmantest.BuildImage(t, "runs", "LABEL fleet-test=v2\n"+runsFile)
	ok0 := podmantest.BuildImage(t, "exit0", exit0File)
	tests := []struct {
		name string
		at   string
		// kept are containers the cancelled pass left that the next pass
		// must keep (same ID).
		kept []string
	}{
		{"cancelled after creating a service: the next pass starts that container", "create api", []string{"migrate", "api"}},
		{"cancelled after stopping the old service: the next pass removes it and starts the new one", "stop api", []string{"migrate"}},
		{"cancelled after creating the init container: the next pass starts and waits for that container", "create migrate", []string{"migrate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newPodmanWorld(t)
			w.r.StopTimeout = 2 * time.Second
			sc := func(img string) score.Score {
				return score.Score{Data: score.PodmanV0{
					InitContainer: &score.Service{Name: w.name("migrate"), Image: ok0},
					Services:      []score.Service{{Name: w.name("api"), Image: img}, {Name: w.name("worker"), Image: runs}},
				}}
			}
			if err := w.r.Apply(w.ctx, w.entry(1, sc(runs))); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(w.ctx)
			defer cancel()
			w.r.Runtime = newCanceller(w.rt, tt.at+"-"+w.suffix, cancel)
			if err := w.r.Apply(ctx, w.entry(2, sc(runs2))); !errors.Is(err, context.Canceled) {
				t.Fatalf("the cancelled pass returned %v, want context.Canceled", err)
			}
			left := w.byName()
			w.r.Runtime = w.rt
			if err := w.r.Apply(w.ctx, w.entry(2, sc(runs2))); err != nil {
				t.Fatalf("the next pass: %v", err)
			}
			after := w.byName()
			revision := after[w.name("api")].Labels[agent.LabelRevision]
			for _, n := range []string{"migrate", "api", "worker"} {
				c := after[w.name(n)]
				want := runtime.StateRunning
				if n == "migrate" {
					want = runtime.StateExited
				}
				if c.State != want || c.Labels[agent.LabelRevision] != revision {
					t.Errorf("%s: %s at revision %s, want %s at %s", n, c.State, c.Labels[agent.LabelRevision], want, revision)
				}
			}
			for _, n := range tt.kept {
				if after[w.name(n)].ID != left[w.name(n)].ID {
					t.Errorf("%s was replaced; want the container the cancelled pass left", n)
				}
			}
		})
	}
}

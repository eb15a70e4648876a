package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/podman"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// The reconcile semantics on real Podman: the same rules the simulated
// runtime tests check, against the engine devices run.

const (
	runsFile  = "CMD [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n"
	exit0File = "CMD [\"sh\", \"-c\", \"exit 0\"]\n"
	exit3File = "CMD [\"sh\", \"-c\", \"exit 3\"]\n"
)

type podmanWorld struct {
	t      testing.TB
	ctx    context.Context
	rt     *podman.Runtime
	r      *agent.Reconciler
	ns     string
	suffix string
	// device is the id the world's agent acts for (r.Device), the
	// world's own: every run of these tests shares the machine's Podman,
	// and an agent's pass removes the containers of its device that its
	// intent lacks, so one id for all would let one run remove another's.
	device string
}

func newPodmanWorld(t *testing.T) *podmanWorld { return newPodmanWorldB(t) }

// newPodmanWorldB is newPodmanWorld for tests and benchmarks.
func newPodmanWorldB(t testing.TB) *podmanWorld {
	podmantest.Connect(t) // applies the CI policy when Podman is missing
	sock, err := podmantest.SocketPath()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout(t))
	t.Cleanup(cancel)
	rt, err := podman.New(ctx, podman.Options{URI: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	w := &podmanWorld{t: t, ctx: ctx, rt: rt, ns: fmt.Sprintf("pt%d", os.Getpid()), suffix: suffix, device: "pt-" + suffix,
		r: &agent.Reconciler{Runtime: rt, Device: "pt-" + suffix, StopTimeout: 10 * time.Second, EnsureHostPath: func(p string) error { return os.MkdirAll(p, 0o755) }}}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = w.r.Remove(ctx, w.ns, "analysis")
	})
	return w
}

// waitMargin is what a test keeps, of go test's deadline, for its
// cleanup and its failure's report.
const waitMargin = 30 * time.Second

// testTimeout is how long a test on real Podman may wait from now: until
// go test's deadline (-timeout) less waitMargin, or 10 minutes when the
// binary has none. A loaded machine is slow for every test alike: a fixed
// wait shorter than the run's own deadline only fails a test that would
// have passed.
func testTimeout(tb testing.TB) time.Duration {
	timeout := 10 * time.Minute
	if d, ok := tb.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			timeout = time.Until(dl) - waitMargin
		}
	}
	return max(timeout, time.Second)
}

// left is how long the world's test may still wait: until its context's
// deadline (testTimeout from the world's start).
func (w *podmanWorld) left() time.Duration {
	if dl, ok := w.ctx.Deadline(); ok {
		return max(time.Until(dl), time.Second)
	}
	return testTimeout(w.t)
}

func (w *podmanWorld) name(n string) string { return n + "-" + w.suffix }

func (w *podmanWorld) entry(gen int64, s score.Score) events.IntentEntry {
	return w.entryB(w.t, gen, s)
}

func (w *podmanWorld) entryB(tb testing.TB, gen int64, s score.Score) events.IntentEntry {
	return events.IntentEntry{Namespace: w.ns, Name: "analysis", UID: "u1", Generation: gen, RevisionID: "r", Score: scoreJSON(tb, s)}
}

func (w *podmanWorld) byName() map[string]runtime.Container {
	w.t.Helper()
	all, err := w.rt.List(w.ctx)
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]runtime.Container{}
	for _, c := range all {
		out[c.Name] = c
	}
	return out
}

func TestReconcileOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	runs := podmantest.BuildImage(t, "runs", runsFile)
	ok0 := podmantest.BuildImage(t, "exit0", exit0File)
	fail3 := podmantest.BuildImage(t, "exit3", exit3File)
	s := score.Score{Data: score.PodmanV0{
		InitContainer: &score.Service{Name: w.name("migrate"), Image: ok0},
		Services: []score.Service{{Name: w.name("api"), Image: runs, Ports: []string{"18080:8080"},
			Volumes: []score.Volume{{HostPath: t.TempDir() + "/data", ContainerPath: "/data"}}}},
	}}

	if err := w.r.Apply(w.ctx, w.entry(1, s)); err != nil {
		t.Fatal(err)
	}
	cs := w.byName()
	initC, api := cs[w.name("migrate")], cs[w.name("api")]
	if initC.State != runtime.StateExited || initC.ExitCode != 0 {
		t.Errorf("init container %+v, want exited 0 (the completion marker)", initC)
	}
	if api.State != runtime.StateRunning || api.Labels[agent.LabelOwner] != agent.OwnerValue || len(api.Ports) != 1 || api.Ports[0].HostPort != 18080 {
		t.Errorf("service %+v", api)
	}

	t.Run("an unchanged score reruns nothing", func(t *testing.T) {
		if err := w.r.Apply(w.ctx, w.entry(1, s)); err != nil {
			t.Fatal(err)
		}
		cs := w.byName()
		if cs[w.name("migrate")].ID != initC.ID || cs[w.name("api")].ID != api.ID {
			t.Error("a container was replaced although the score did not change")
		}
	})
	t.Run("a failing init container leaves the running service untouched", func(t *testing.T) {
		bad := s
		bad.Data.InitContainer = &score.Service{Name: w.name("migrate"), Image: fail3}
		err := w.r.Apply(w.ctx, w.entry(2, bad))
		var ie *agent.InitFailedError
		if !errors.As(err, &ie) || ie.ExitCode != 3 {
			t.Fatalf("got %v, want exit code 3", err)
		}
		if c := w.byName()[w.name("api")]; c.ID != api.ID || c.State != runtime.StateRunning {
			t.Errorf("service after the failed init: %+v", c)
		}
	})
	t.Run("a foreign container with a wanted name is never touched", func(t *testing.T) {
		id, err := w.rt.Create(w.ctx, runtime.ContainerSpec{Name: w.name("foreign"), Image: runs, Labels: podmantest.Labels(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.rt.Remove(context.Background(), id, true) })
		s2 := s
		s2.Data.Services = append(s2.Data.Services, score.Service{Name: w.name("foreign"), Image: runs})
		err = w.r.Apply(w.ctx, w.entry(3, s2))
		var pe *agent.PreflightError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), "does not own") {
			t.Fatalf("got %v", err)
		}
		if c := w.byName()[w.name("foreign")]; c.ID != id {
			t.Error("the foreign container was touched")
		}
		if err := w.r.Remove(w.ctx, w.ns, "analysis"); err != nil {
			t.Fatal(err)
		}
		cs := w.byName()
		if _, ok := cs[w.name("api")]; ok {
			t.Error("removal left the service")
		}
		if _, ok := cs[w.name("migrate")]; ok {
			t.Error("removal left the init container")
		}
		if cs[w.name("foreign")].ID != id {
			t.Error("removal touched the foreign container")
		}
	})
}

func TestPullWithDevicePullSecretOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	reg := podmantest.TestRegistry(t)
	ref := podmantest.PushImage(t, reg, "fleet-agent-test/private", "FROM "+podmantest.BaseImage+"\n"+runsFile)
	// Make sure the image must be pulled.
	_ = podmanRemoveImage(w, ref)
	good := fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, reg.Addr, reg.Username, reg.Password)
	bad := fmt.Sprintf(`{"registry":%q,"username":%q,"password":"wrong-password"}`, reg.Addr, reg.Username)
	s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("private"), Image: ref, ImagePullSecret: "hub"}}}}

	t.Run("a wrong password is an authentication failure and shows no password", func(t *testing.T) {
		w.r.Credentials = creds{"hub": bad}
		err := w.r.Apply(w.ctx, w.entry(1, s))
		if !errors.Is(err, runtime.ErrAuth) {
			t.Fatalf("got %v, want runtime.ErrAuth", err)
		}
		if strings.Contains(err.Error(), "wrong-password") || strings.Contains(err.Error(), reg.Password) {
			t.Error("the error shows a password")
		}
	})
	t.Run("the right credential pulls by digest and the service runs", func(t *testing.T) {
		w.r.Credentials = creds{"hub": good}
		if err := w.r.Apply(w.ctx, w.entry(1, s)); err != nil {
			t.Fatal(err)
		}
		if c := w.byName()[w.name("private")]; c.State != runtime.StateRunning {
			t.Errorf("service %+v", c)
		}
	})
}

func podmanRemoveImage(w *podmanWorld, ref string) error {
	return podmantest.RemoveImage(w.t, ref)
}

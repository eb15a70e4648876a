package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// recorder is a runtime that records the calls that change containers, as
// "op name", in order.
type recorder struct {
	runtime.Runtime
	mu    sync.Mutex // guards the fields below
	names map[string]string
	calls []string
}

func newRecorder(rt runtime.Runtime) *recorder {
	return &recorder{Runtime: rt, names: map[string]string{}}
}

func (r *recorder) record(op, idOrName string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := idOrName
	if n, ok := r.names[idOrName]; ok {
		name = n
	}
	r.calls = append(r.calls, op+" "+name)
}

// take returns the calls recorded so far and forgets them.
func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

func (r *recorder) List(ctx context.Context) ([]runtime.Container, error) {
	cs, err := r.Runtime.List(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		r.names[c.ID] = c.Name
	}
	return cs, err
}

func (r *recorder) Create(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	id, err := r.Runtime.Create(ctx, spec)
	r.mu.Lock()
	r.names[id] = spec.Name
	r.mu.Unlock()
	r.record("create", spec.Name)
	return id, err
}

func (r *recorder) Start(ctx context.Context, id string) error {
	r.record("start", id)
	return r.Runtime.Start(ctx, id)
}

func (r *recorder) Stop(ctx context.Context, id string, timeout time.Duration) error {
	r.record("stop", id)
	return r.Runtime.Stop(ctx, id, timeout)
}

func (r *recorder) Remove(ctx context.Context, id string, force bool) error {
	r.record("remove", id)
	return r.Runtime.Remove(ctx, id, force)
}

// svc is a service of the port tests: image img (exits with code when it
// contains exit-<code>), host ports as "host:container".
func svc(name, img string, ports ...string) score.Service {
	return score.Service{Name: name, Image: img, Ports: ports}
}

// portsOf returns each running container's name → its host ports.
func portsOf(cs []runtime.Container) map[string][]uint16 {
	out := map[string][]uint16{}
	for _, c := range cs {
		if c.State != runtime.StateRunning {
			continue
		}
		ports := []uint16{}
		for _, p := range c.Ports {
			ports = append(ports, p.HostPort)
		}
		out[c.Name] = ports
	}
	return out
}

func TestServicesThatMoveANameOrAHostPortConvergeInOnePass(t *testing.T) {
	const v1, v2 = "reg.example/api:v1", "reg.example/api:v2"
	tests := []struct {
		name          string
		before, after score.PodmanV0
		// calls are the container changes of the second pass, in order.
		calls []string
		// running is every running container's host ports after it.
		running map[string][]uint16
	}{
		{"a plain image change replaces each service in turn, stop old then start new, ports kept",
			score.PodmanV0{Services: []score.Service{svc("web", v1, "8080:80"), svc("worker", v1)}},
			score.PodmanV0{Services: []score.Service{svc("web", v2, "8080:80"), svc("worker", v1)}},
			[]string{"stop web", "remove web", "create web", "start web", "stop worker", "remove worker", "create worker", "start worker"},
			map[string][]uint16{"web": {8080}, "worker": {}}},
		{"a renamed service keeping its host port frees it before the new name starts",
			score.PodmanV0{Services: []score.Service{svc("web", v1, "8080:80"), svc("worker", v1)}},
			score.PodmanV0{Services: []score.Service{svc("web2", v1, "8080:80"), svc("worker", v1)}},
			[]string{"stop web", "remove web", "create web2", "start web2", "stop worker", "remove worker", "create worker", "start worker"},
			map[string][]uint16{"web2": {8080}, "worker": {}}},
		{"a host port moving to a service earlier in the score stops only the service that held it",
			score.PodmanV0{Services: []score.Service{svc("a", v1, "8080:80"), svc("b", v1), svc("c", v1)}},
			score.PodmanV0{Services: []score.Service{svc("b", v1, "8080:80"), svc("c", v1), svc("a", v1, "8081:80")}},
			[]string{"stop a", "remove a", "stop b", "remove b", "create b", "start b", "stop c", "remove c", "create c", "start c", "create a", "start a"},
			map[string][]uint16{"a": {8081}, "b": {8080}, "c": {}}},
		{"two services swapping their host ports converge",
			score.PodmanV0{Services: []score.Service{svc("a", v1, "8080:80"), svc("b", v1, "8081:80")}},
			score.PodmanV0{Services: []score.Service{svc("a", v1, "8081:80"), svc("b", v1, "8080:80")}},
			[]string{"stop a", "remove a", "stop b", "remove b", "create a", "start a", "create b", "start b"},
			map[string][]uint16{"a": {8081}, "b": {8080}}},
		{"a former service's name reused by the init container",
			score.PodmanV0{Services: []score.Service{svc("setup", v1, "8080:80"), svc("api", v1)}},
			score.PodmanV0{InitContainer: &score.Service{Name: "setup", Image: "reg.example/migrate:v1"},
				Services: []score.Service{svc("api", v1, "8080:80")}},
			[]string{"stop setup", "remove setup", "create setup", "start setup", "stop api", "remove api", "create api", "start api"},
			map[string][]uint16{"api": {8080}}},
		{"the former init container's name reused by a service",
			score.PodmanV0{InitContainer: &score.Service{Name: "setup", Image: "reg.example/migrate:v1"},
				Services: []score.Service{svc("api", v1, "8080:80")}},
			score.PodmanV0{Services: []score.Service{svc("setup", v1, "8080:80"), svc("api", v1)}},
			[]string{"stop api", "remove api", "remove setup", "create setup", "start setup", "create api", "start api"},
			map[string][]uint16{"setup": {8080}, "api": {}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			rec := newRecorder(w.rt)
			w.r.Runtime = rec
			if err := w.r.Apply(w.ctx, entry(t, 1, score.Score{Data: tt.before})); err != nil {
				t.Fatal(err)
			}
			rec.take()
			if err := w.r.Apply(w.ctx, entry(t, 2, score.Score{Data: tt.after})); err != nil {
				t.Fatalf("second pass: %v", err)
			}
			if diff := cmp.Diff(tt.calls, rec.take()); diff != "" {
				t.Errorf("container changes (-want +got):\n%s", diff)
			}
			all, err := w.rt.List(w.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.running, portsOf(all)); diff != "" {
				t.Errorf("running containers' host ports (-want +got):\n%s", diff)
			}
		})
	}
}

// listen holds a free host port on 127.0.0.1 with proto for the test.
func listen(t *testing.T, proto string) uint16 {
	t.Helper()
	var addr net.Addr
	if proto == "tcp" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = l.Close() })
		addr = l.Addr()
	} else {
		c, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		addr = c.LocalAddr()
	}
	_, port, _ := net.SplitHostPort(addr.String())
	p, _ := strconv.Atoi(port)
	return uint16(p)
}

func TestPreflightRefusesAHostPortAProcessThatIsNotAContainerListensOn(t *testing.T) {
	for _, proto := range []string{"tcp", "udp"} {
		t.Run("a "+proto+" listener is refused with the port, the service and the fix", func(t *testing.T) {
			w := newWorld(t)
			w.r.PortInUse = agent.HostPortInUse
			port := listen(t, proto)
			s := score.Score{Data: score.PodmanV0{Services: []score.Service{
				svc("web", "reg.example/api:v1", fmt.Sprintf("%d:80/%s", port, proto))}}}
			err := w.r.Apply(w.ctx, entry(t, 1, s))
			var pe *agent.PreflightError
			want := fmt.Sprintf("host port %s/%d wanted by web is in use by a process that is not a container: stop that process or publish web on another host port", proto, port)
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want a preflight error with %q", err, want)
			}
			if cs := w.containers(); len(cs) != 0 {
				t.Errorf("preflight failed but left containers %v", cs)
			}
		})
	}
	t.Run("a port the Deployment's own running container publishes is not asked about", func(t *testing.T) {
		w := newWorld(t)
		s := score.Score{Data: score.PodmanV0{Services: []score.Service{svc("web", "reg.example/api:v1", "8080:80")}}}
		if err := w.r.Apply(w.ctx, entry(t, 1, s)); err != nil {
			t.Fatal(err)
		}
		var asked []string
		w.r.PortInUse = func(proto string, port uint16) (bool, error) {
			asked = append(asked, fmt.Sprintf("%s/%d", proto, port))
			return true, nil // as rootless Podman's port forwarder, listening for the running web
		}
		s.Data.Services[0].Image = "reg.example/api:v2"
		if err := w.r.Apply(w.ctx, entry(t, 2, s)); err != nil {
			t.Fatalf("replacing the service on its own port: %v", err)
		}
		if len(asked) != 0 {
			t.Errorf("asked about %v", asked)
		}
	})
	t.Run("a port that cannot be checked is let through", func(t *testing.T) {
		w := newWorld(t)
		w.r.PortInUse = func(string, uint16) (bool, error) { return false, errors.New("no socket table") }
		s := score.Score{Data: score.PodmanV0{Services: []score.Service{svc("web", "reg.example/api:v1", "8080:80")}}}
		if err := w.r.Apply(w.ctx, entry(t, 1, s)); err != nil {
			t.Fatal(err)
		}
	})
}

// freePort returns a TCP port that was free on the host a moment ago.
func freePort(t *testing.T) uint16 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

func TestServicesThatMoveANameOrAHostPortConvergeOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	w.r.StopTimeout = 2 * time.Second
	w.r.PortInUse = agent.HostPortInUse
	v1 := podmantest.BuildImage(t, "runs", runsFile)
	v2 := podmantest.BuildImage(t, "runs", "LABEL fleet-test=v2\n"+runsFile)
	ok0 := podmantest.BuildImage(t, "exit0", exit0File)
	p1, p2 := freePort(t), freePort(t)
	port := func(p uint16) string { return fmt.Sprintf("%d:8080", p) }
	n := w.name
	steps := []struct {
		name  string
		score score.PodmanV0
		// calls are the container changes of the pass, in order.
		calls []string
		// running is every running container's host ports after it.
		running map[string][]uint16
	}{
		{"the first pass starts web on its port and worker",
			score.PodmanV0{Services: []score.Service{svc(n("web"), v1, port(p1)), svc(n("worker"), v1)}},
			[]string{"create " + n("web"), "start " + n("web"), "create " + n("worker"), "start " + n("worker")},
			map[string][]uint16{n("web"): {p1}, n("worker"): {}}},
		{"a plain image change replaces each service in turn, stop old then start new, its host port kept",
			score.PodmanV0{Services: []score.Service{svc(n("web"), v2, port(p1)), svc(n("worker"), v1)}},
			[]string{"stop " + n("web"), "remove " + n("web"), "create " + n("web"), "start " + n("web"),
				"stop " + n("worker"), "remove " + n("worker"), "create " + n("worker"), "start " + n("worker")},
			map[string][]uint16{n("web"): {p1}, n("worker"): {}}},
		{"web renamed web2 with the same host port frees it before web2 starts",
			score.PodmanV0{Services: []score.Service{svc(n("web2"), v2, port(p1)), svc(n("worker"), v1)}},
			[]string{"stop " + n("web"), "remove " + n("web"), "create " + n("web2"), "start " + n("web2"),
				"stop " + n("worker"), "remove " + n("worker"), "create " + n("worker"), "start " + n("worker")},
			map[string][]uint16{n("web2"): {p1}, n("worker"): {}}},
		{"the host port moving from web2 to worker while both stay converges",
			score.PodmanV0{Services: []score.Service{svc(n("worker"), v1, port(p1)), svc(n("web2"), v2, port(p2))}},
			[]string{"stop " + n("web2"), "remove " + n("web2"), "stop " + n("worker"), "remove " + n("worker"),
				"create " + n("worker"), "start " + n("worker"), "create " + n("web2"), "start " + n("web2")},
			map[string][]uint16{n("worker"): {p1}, n("web2"): {p2}}},
		{"the init container takes the name of a former service",
			score.PodmanV0{InitContainer: &score.Service{Name: n("web2"), Image: ok0},
				Services: []score.Service{svc(n("worker"), v1, port(p2))}},
			[]string{"stop " + n("web2"), "remove " + n("web2"), "create " + n("web2"), "start " + n("web2"),
				"stop " + n("worker"), "remove " + n("worker"), "create " + n("worker"), "start " + n("worker")},
			map[string][]uint16{n("worker"): {p2}}},
		{"a service takes the name of the former init container",
			score.PodmanV0{Services: []score.Service{svc(n("web2"), v1, port(p2)), svc(n("worker"), v1)}},
			[]string{"remove " + n("web2"), "stop " + n("worker"), "remove " + n("worker"), "create " + n("web2"), "start " + n("web2"),
				"create " + n("worker"), "start " + n("worker")},
			map[string][]uint16{n("web2"): {p2}, n("worker"): {}}},
	}
	rec := newRecorder(w.rt)
	w.r.Runtime = rec
	for i, st := range steps {
		if !t.Run(st.name, func(t *testing.T) {
			if err := w.r.Apply(w.ctx, w.entry(int64(i+1), score.Score{Data: st.score})); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(st.calls, rec.take()); diff != "" {
				t.Errorf("container changes (-want +got):\n%s", diff)
			}
			all, err := w.rt.List(w.ctx)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]uint16{}
			for name, ports := range portsOf(all) {
				if strings.HasSuffix(name, w.suffix) {
					got[name] = ports
				}
			}
			if diff := cmp.Diff(st.running, got); diff != "" {
				t.Errorf("running containers' host ports (-want +got):\n%s", diff)
			}
		}) {
			break // the next step starts from this one's state
		}
	}
}

func TestPreflightRefusesAHostPortAProcessThatIsNotAContainerListensOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	w.r.StopTimeout = 2 * time.Second
	w.r.PortInUse = agent.HostPortInUse
	runs := podmantest.BuildImage(t, "runs", runsFile)
	port := listen(t, "tcp")
	s := score.Score{Data: score.PodmanV0{Services: []score.Service{svc(w.name("web"), runs, fmt.Sprintf("%d:8080", port))}}}
	err := w.r.Apply(w.ctx, w.entry(1, s))
	var pe *agent.PreflightError
	want := fmt.Sprintf("host port tcp/%d wanted by %s is in use by a process that is not a container", port, w.name("web"))
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v, want a preflight error with %q", err, want)
	}
	if _, ok := w.byName()[w.name("web")]; ok {
		t.Error("preflight failed but created the service")
	}
}

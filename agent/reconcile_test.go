package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/score"
)

const secretValue = "s3cret-value-never-shown"

type secrets map[string]string

func (s secrets) Resolve(_ context.Context, path, key string) (string, error) {
	v, ok := s[path+"#"+key]
	if !ok {
		return "", errors.New("no such secret")
	}
	return v, nil
}

type creds map[string]string

func (c creds) PullCredential(_ context.Context, ref string) ([]byte, error) {
	v, ok := c[ref]
	if !ok {
		return nil, errors.New("no such pull secret")
	}
	return []byte(v), nil
}

func scoreJSON(t testing.TB, s score.Score) json.RawMessage {
	t.Helper()
	s.Type = "PodmanV0"
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func baseScore() score.Score {
	return score.Score{Data: score.PodmanV0{
		InitContainer: &score.Service{Name: "migrate", Image: "reg.example/migrate:v1", RestartPolicy: "always"},
		Services: []score.Service{
			{Name: "api", Image: "reg.example/api:v1", Ports: []string{"8080:8080"}, RestartPolicy: "unless-stopped",
				SecretEnv: []score.SecretEnv{{Name: "DB_PASSWORD", Secret: "lab/db", Key: "password"}}},
			{Name: "worker", Image: "reg.example/worker:v1"},
		},
	}}
}

func entry(t *testing.T, gen int64, s score.Score) events.IntentEntry {
	return events.IntentEntry{Namespace: "lab", Name: "analysis", UID: "u1", Generation: gen, RevisionID: "r", Score: scoreJSON(t, s)}
}

type world struct {
	t   *testing.T
	ctx context.Context
	rt  *sim.Runtime
	r   *agent.Reconciler
	sec secrets
}

// newWorld is a simulated device with the images of the reconcile tests;
// opts change the simulated runtime's options.
func newWorld(t *testing.T, opts ...func(*sim.Options)) *world {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	o := sim.Options{
		LocalImages: []string{"reg.example/migrate:v1", "reg.example/migrate:v2", "reg.example/api:v1", "reg.example/api:v2",
			"reg.example/worker:v1", "reg.example/migrate-exit-3:v1", "foreign:v1"},
		Registry: map[string]sim.RegistryImage{
			"hub.example:5000/private/api@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa": {Auth: &runtime.RegistryAuth{Username: "puller", Password: "pull-pass"}},
		},
		Behave: func(spec runtime.ContainerSpec) sim.Behaviour {
			if strings.Contains(spec.Image, "migrate") && !strings.Contains(spec.Image, "exit-") {
				return sim.Behaviour{Exits: true}
			}
			return sim.DefaultBehaviour(spec)
		},
	}
	for _, opt := range opts {
		opt(&o)
	}
	rt := sim.New(o)
	sec := secrets{"lab/db#password": secretValue}
	return &world{t: t, ctx: ctx, rt: rt, sec: sec, r: &agent.Reconciler{Runtime: rt, Secrets: sec, StopTimeout: time.Second,
		Credentials: creds{"hub-pull": `{"registry":"HUB.example:5000","username":"puller","password":"pull-pass"}`,
			"other-pull": `{"registry":"hub.example","username":"puller","password":"pull-pass"}`}}}
}

func (w *world) containers() map[string]runtime.Container {
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

func TestApplyRunsTheInitContainerThenTheServices(t *testing.T) {
	w := newWorld(t)
	if err := w.r.Apply(w.ctx, entry(t, 1, baseScore())); err != nil {
		t.Fatal(err)
	}
	cs := w.containers()
	if c := cs["migrate"]; c.State != runtime.StateExited || c.ExitCode != 0 || c.Labels[agent.LabelRole] != "init" {
		t.Errorf("init container %+v, want exited 0 as the completion marker", c)
	}
	if p, _ := w.rt.RestartPolicy("migrate"); p != runtime.RestartNo {
		t.Errorf("init container restart policy %q, want no whatever the score says", p)
	}
	for _, name := range []string{"api", "worker"} {
		c := cs[name]
		if c.State != runtime.StateRunning || c.Labels[agent.LabelOwner] != agent.OwnerValue || c.Labels[agent.LabelRevision] == "" {
			t.Errorf("service %s: %+v", name, c)
		}
	}
	if p, _ := w.rt.RestartPolicy("api"); p != "unless-stopped" {
		t.Errorf("service restart policy %q", p)
	}

	t.Run("an unchanged score changes nothing and does not rerun the init container", func(t *testing.T) {
		before := w.containers()
		if err := w.r.Apply(w.ctx, entry(t, 1, baseScore())); err != nil {
			t.Fatal(err)
		}
		after := w.containers()
		for name, c := range before {
			if after[name].ID != c.ID {
				t.Errorf("%s was replaced", name)
			}
		}
	})
	t.Run("a changed service field replaces and reruns the init container, then the services", func(t *testing.T) {
		before := w.containers()
		s := baseScore()
		s.Data.Services[1].Image = "reg.example/api:v2"
		if err := w.r.Apply(w.ctx, entry(t, 2, s)); err != nil {
			t.Fatal(err)
		}
		after := w.containers()
		for _, name := range []string{"migrate", "worker"} {
			if after[name].ID == before[name].ID {
				t.Errorf("%s was not replaced", name)
			}
		}
		if after["api"].ID == before["api"].ID {
			t.Error("api carries the old revision label but was kept")
		}
	})
	t.Run("a changed secret value is a new revision too", func(t *testing.T) {
		s := baseScore()
		s.Data.Services[1].Image = "reg.example/api:v2"
		before := w.containers()
		w.sec["lab/db#password"] = secretValue + "-rotated"
		defer func() { w.sec["lab/db#password"] = secretValue }()
		if err := w.r.Apply(w.ctx, entry(t, 2, s)); err != nil {
			t.Fatal(err)
		}
		if w.containers()["migrate"].ID == before["migrate"].ID {
			t.Error("the init container did not rerun after the resolved score changed")
		}
	})
}

func TestAFailingInitContainerLeavesTheServicesUntouched(t *testing.T) {
	w := newWorld(t)
	if err := w.r.Apply(w.ctx, entry(t, 1, baseScore())); err != nil {
		t.Fatal(err)
	}
	before := w.containers()
	s := baseScore()
	s.Data.InitContainer.Image = "reg.example/migrate-exit-3:v1"
	s.Data.Services[0].Image = "reg.example/api:v2"
	err := w.r.Apply(w.ctx, entry(t, 2, s))
	var ie *agent.InitFailedError
	if !errors.As(err, &ie) || ie.ExitCode != 3 {
		t.Fatalf("got %v, want an InitFailedError with exit code 3", err)
	}
	after := w.containers()
	for _, name := range []string{"api", "worker"} {
		if after[name].ID != before[name].ID || after[name].State != runtime.StateRunning {
			t.Errorf("service %s was touched after the init container failed", name)
		}
	}
	t.Run("the next pass retries the init container", func(t *testing.T) {
		failed := w.containers()["migrate"].ID
		if err := w.r.Apply(w.ctx, entry(t, 2, s)); !errors.As(err, &ie) {
			t.Fatalf("got %v", err)
		}
		if w.containers()["migrate"].ID == failed {
			t.Error("the failed init container was not replaced and rerun")
		}
	})
}

func TestPreflightChangesNothing(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(w *world)
		score   func() score.Score
		want    string
	}{
		{"a foreign container with a wanted name is refused", func(w *world) {
			w.foreign("api", nil)
		}, baseScore, `container name "api" is taken by a container this Deployment does not own (not managed by Fleet)`},
		{"a foreign container on a wanted host port is refused", func(w *world) {
			w.foreign("web", []runtime.PortBinding{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}})
		}, baseScore, `host port tcp/8080 wanted by api is used by container "web"`},
		{"two services on one host port are refused", func(*world) {}, func() score.Score {
			s := baseScore()
			s.Data.Services[1].Ports = []string{"8080:9090"}
			return s
		}, "host port tcp/8080 is published by both api and worker"},
		{"an image that is neither present nor pullable is refused", func(*world) {}, func() score.Score {
			s := baseScore()
			s.Data.Services[1].Image = "reg.example/missing:v1"
			return s
		}, "image reg.example/missing:v1 could not be pulled from reg.example (anonymously): the image does not exist in the registry"},
		{"a pull secret for another registry authority is never sent", func(*world) {}, func() score.Score {
			s := baseScore()
			s.Data.Services[1].Image = "hub.example:5000/private/api@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
			s.Data.Services[1].ImagePullSecret = "other-pull"
			return s
		}, "is for registry hub.example, but image hub.example:5000/private/api@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa is on hub.example:5000: refusing to send the credential"},
		{"a missing secret is refused", func(w *world) { delete(w.sec, "lab/db#password") }, baseScore, "secret_env DB_PASSWORD"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			tc.prepare(w)
			before := w.containers()
			err := w.r.Apply(w.ctx, entry(t, 1, tc.score()))
			var pe *agent.PreflightError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want a preflight error with %q", err, tc.want)
			}
			if after := w.containers(); len(after) != len(before) {
				t.Errorf("preflight failed but containers went from %d to %d", len(before), len(after))
			}
		})
	}
}

func (w *world) foreign(name string, ports []runtime.PortBinding) string {
	w.t.Helper()
	id, err := w.rt.Create(w.ctx, runtime.ContainerSpec{Name: name, Image: "foreign:v1", Ports: ports, Labels: map[string]string{"app": "mine"}})
	if err != nil {
		w.t.Fatal(err)
	}
	if err := w.rt.Start(w.ctx, id); err != nil {
		w.t.Fatal(err)
	}
	return id
}

func TestPullCredentialsAreSentOnlyForAMissingImageOfTheSameAuthority(t *testing.T) {
	w := newWorld(t)
	s := baseScore()
	s.Data.Services[1].Image = "hub.example:5000/private/api@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	s.Data.Services[1].ImagePullSecret = "hub-pull"
	if err := w.r.Apply(w.ctx, entry(t, 1, s)); err != nil {
		t.Fatal(err)
	}
	if ok, _ := w.rt.ImageExists(w.ctx, "hub.example:5000/private/api@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"); !ok {
		t.Error("the private image was not pulled")
	}
	t.Run("a wrong password is an authentication failure", func(t *testing.T) {
		w := newWorld(t)
		w.r.Credentials = creds{"hub-pull": `{"registry":"hub.example:5000","username":"puller","password":"wrong"}`}
		err := w.r.Apply(w.ctx, entry(t, 1, s))
		if !errors.Is(err, runtime.ErrAuth) {
			t.Errorf("got %v, want runtime.ErrAuth", err)
		}
		if strings.Contains(err.Error(), "wrong") {
			t.Error("the error shows the password")
		}
	})
}

func TestOwnershipAndRemoval(t *testing.T) {
	w := newWorld(t)
	foreignID := w.foreign("other-app", nil)
	if err := w.r.Apply(w.ctx, entry(t, 1, baseScore())); err != nil {
		t.Fatal(err)
	}
	deps, err := w.r.Deployments(w.ctx)
	if err != nil || len(deps) != 1 || deps[0] != [2]string{"lab", "analysis"} {
		t.Errorf("deployments from labels: %v, %v", deps, err)
	}
	if err := w.r.Remove(w.ctx, "lab", "analysis"); err != nil {
		t.Fatal(err)
	}
	cs := w.containers()
	if len(cs) != 1 || cs["other-app"].ID != foreignID || cs["other-app"].State != runtime.StateRunning {
		t.Errorf("after removal: %v; want only the untouched foreign container", cs)
	}
}

func TestACrashBetweenCreateAndStartIsRepairedWithoutADuplicate(t *testing.T) {
	w := newWorld(t)
	if err := w.r.Apply(w.ctx, entry(t, 1, baseScore())); err != nil {
		t.Fatal(err)
	}
	// Simulate a kill -9 after create, before start: the service exists
	// with the current labels but never ran.
	api := w.containers()["api"]
	if err := w.rt.Remove(w.ctx, api.ID, true); err != nil {
		t.Fatal(err)
	}
	id, err := w.rt.Create(w.ctx, runtime.ContainerSpec{Name: "api", Image: api.Image, Labels: api.Labels})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.r.Apply(w.ctx, entry(t, 1, baseScore())); err != nil {
		t.Fatal(err)
	}
	cs := w.containers()
	if len(cs) != 3 {
		t.Errorf("%d containers, want 3 (no duplicate)", len(cs))
	}
	if cs["api"].ID != id || cs["api"].State != runtime.StateRunning {
		t.Errorf("api %+v: want the created container started, not replaced", cs["api"])
	}
}

func TestNoSecretValueInLabelsOrErrors(t *testing.T) {
	w := newWorld(t)
	if err := w.r.Apply(w.ctx, entry(t, 1, baseScore())); err != nil {
		t.Fatal(err)
	}
	for _, c := range w.containers() {
		for k, v := range c.Labels {
			if strings.Contains(k+v, secretValue) {
				t.Errorf("container %s label %s carries the secret", c.Name, k)
			}
		}
	}
	s := baseScore()
	s.Data.InitContainer.Image = "reg.example/migrate-exit-3:v1"
	if err := w.r.Apply(w.ctx, entry(t, 2, s)); err == nil || strings.Contains(err.Error(), secretValue) {
		t.Errorf("error %v", err)
	}
}

func TestAgentsOfTwoDevicesOnOneEngineNeverTouchEachOther(t *testing.T) {
	w := newWorld(t)
	a := &agent.Reconciler{Runtime: w.rt, Secrets: w.sec, Device: "dev-a", StopTimeout: time.Second}
	b := &agent.Reconciler{Runtime: w.rt, Secrets: w.sec, Device: "dev-b", StopTimeout: time.Second}
	s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "only-a", Image: "reg.example/worker:v1"}}}}
	if err := a.Apply(w.ctx, entry(t, 1, s)); err != nil {
		t.Fatal(err)
	}
	deps, err := b.Deployments(w.ctx)
	if err != nil || len(deps) != 0 {
		t.Errorf("device b sees deployments %v (%v), want none of a's", deps, err)
	}
	if err := b.Remove(w.ctx, "lab", "analysis"); err != nil {
		t.Fatal(err)
	}
	if c := w.containers()["only-a"]; c.State != runtime.StateRunning || c.Labels[agent.LabelDevice] != "dev-a" {
		t.Errorf("device b's removal touched device a's container: %+v", c)
	}
}

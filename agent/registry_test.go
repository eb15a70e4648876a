package agent_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// privateImage is served by newWorld's registry with a pull credential.
const privateImage = "hub.example:5000/private/api@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestAnUnreachableRegistryIsPendingAndADefiniteAnswerIsAFailure(t *testing.T) {
	tests := []struct {
		name        string
		image       string
		pullSecret  string
		registryOff bool
		unavailable bool
		want        error
	}{
		{"a registry that cannot be reached is unavailable", privateImage, "hub-pull", true, true, runtime.ErrRegistryUnavailable},
		{"a tag the registry does not have is a failure", "reg.example/missing:v1", "", false, false, runtime.ErrImageNotFound},
		{"a refused credential is a failure", privateImage, "bad-pull", false, false, runtime.ErrAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.r.Credentials = creds{"hub-pull": `{"registry":"hub.example:5000","username":"puller","password":"pull-pass"}`,
				"bad-pull": `{"registry":"hub.example:5000","username":"puller","password":"wrong"}`}
			w.rt.SetRegistryUnavailable(tt.registryOff)
			s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: tt.image, ImagePullSecret: tt.pullSecret}}}}
			err := w.r.Apply(w.ctx, entry(t, 1, s))
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			ue, ok := agent.AsUnavailable(err)
			if ok != tt.unavailable || (ok && ue.Component != agent.ComponentRegistry) {
				t.Errorf("AsUnavailable = %+v, %v; want %v with component %q", ue, ok, tt.unavailable, agent.ComponentRegistry)
			}
			if runtime.IsUnavailable(err) {
				t.Error("the engine answered, but the error says it is unavailable")
			}
			if len(w.containers()) != 0 {
				t.Error("a failed pull changed containers")
			}
		})
	}
	t.Run("the pass converges once the registry answers again", func(t *testing.T) {
		w := newWorld(t)
		w.rt.SetRegistryUnavailable(true)
		s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: privateImage, ImagePullSecret: "hub-pull"}}}}
		if _, ok := agent.AsUnavailable(w.r.Apply(w.ctx, entry(t, 1, s))); !ok {
			t.Fatal("the first pass is not unavailable")
		}
		w.rt.SetRegistryUnavailable(false)
		if err := w.r.Apply(w.ctx, entry(t, 1, s)); err != nil {
			t.Fatal(err)
		}
		if c := w.containers()["api"]; c.State != runtime.StateRunning {
			t.Errorf("api %+v", c)
		}
	})
}

// TestAnUnreachableRegistryLeavesTheDeploymentPendingUntilItAnswers: the
// daemon reports a registry that cannot be reached as Pending, not Failed,
// and converges by itself once it answers, with no new intent.
func TestAnUnreachableRegistryLeavesTheDeploymentPendingUntilItAnswers(t *testing.T) {
	e := startAgent(t)
	e.world.rt.SetRegistryUnavailable(true)
	s := baseScore()
	s.Data.Services[0].Image = privateImage
	s.Data.Services[0].ImagePullSecret = "hub-pull"
	e.put(entry(t, 1, s))
	st := e.waitStatus(1, events.WorkloadPending)
	want := "registry unavailable, retrying: image " + privateImage + " could not be pulled from hub.example:5000 " +
		"(with the pull secret for hub.example:5000): the registry refused the connection (connection refused)"
	if st.Error != want {
		t.Errorf("pending report\n%q\nwant\n%q", st.Error, want)
	}
	e.world.rt.SetRegistryUnavailable(false)
	e.waitStatus(1, events.WorkloadConverged)
	for _, s := range e.statuses() {
		if s.Phase == events.WorkloadFailed {
			t.Errorf("a failure was reported while the registry was unavailable: %+v", s)
		}
	}
}

func TestAnUnreachableRegistryIsUnavailableAndAMissingTagAFailureOnRealPodman(t *testing.T) {
	w := newPodmanWorld(t)
	reg := podmantest.TestRegistry(t)
	w.r.Credentials = creds{"hub": fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, reg.Addr, reg.Username, reg.Password)}
	closed := strings.TrimPrefix(refusedAddress(t), "http://")
	tests := []struct {
		name        string
		image       string
		pullSecret  string
		unavailable bool
		want        error
	}{
		{"a registry that refuses connections is unavailable", closed + "/fleet-agent-test/none:v1", "", true, runtime.ErrRegistryUnavailable},
		{"a tag the test registry does not have is a failure", reg.Addr + "/fleet-agent-test/private:no-such-tag", "hub", false, runtime.ErrImageNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: tt.image, ImagePullSecret: tt.pullSecret}}}}
			err := w.r.Apply(w.ctx, w.entry(1, s))
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			ue, ok := agent.AsUnavailable(err)
			if ok != tt.unavailable || (ok && ue.Component != agent.ComponentRegistry) {
				t.Errorf("AsUnavailable = %+v, %v; want %v with component %q", ue, ok, tt.unavailable, agent.ComponentRegistry)
			}
			if runtime.IsUnavailable(err) {
				t.Error("Podman answered, but the error says the engine is unavailable")
			}
			if strings.Contains(err.Error(), reg.Password) {
				t.Error("the error shows the registry password")
			}
			if _, ok := w.byName()[w.name("api")]; ok {
				t.Error("a failed pull created the service")
			}
		})
	}
}

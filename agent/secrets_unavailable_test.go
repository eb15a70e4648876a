package agent_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// baoMode is how the fake OpenBao answers.
type baoMode int32

const (
	baoOK          baoMode = iota
	baoSealed              // 503 "Vault is sealed" on every call, login included
	baoHangs               // never answers until the client gives up
	baoMissingKey          // the secret exists without the key asked for
	baoForbidden           // 403 on the read, after a successful login
	baoLoginSealed         // the login answers 503; reads would succeed
)

// fakeBao speaks the part of OpenBao's HTTP API the device uses (JWT
// login, KV v2 read) and fails as mode says. The stand-in
// (dev/baostandin) cannot be sealed, hang or fail its login with a
// 5xx, so the failure modes are played by this server.
type fakeBao struct {
	mode atomic.Int32
	// done ends the requests a hanging server holds (closed before the
	// server is).
	done chan struct{}
}

// startBao starts a fake OpenBao answering as mode says.
func startBao(t *testing.T, mode baoMode) (*fakeBao, *httptest.Server) {
	f := &fakeBao{done: make(chan struct{})}
	f.mode.Store(int32(mode))
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(f.done) }) // runs first
	return f, srv
}

func (f *fakeBao) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mode := baoMode(f.mode.Load())
	reply := func(status int, body any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	}
	login := r.URL.Path == "/v1/auth/jwt/login"
	switch {
	case mode == baoSealed, mode == baoLoginSealed && login:
		reply(http.StatusServiceUnavailable, map[string]any{"errors": []string{"Vault is sealed"}})
	case mode == baoHangs:
		select {
		case <-r.Context().Done():
		case <-f.done:
		}
	case login:
		reply(http.StatusOK, map[string]any{"auth": map[string]any{"client_token": "s.device-token", "lease_duration": 3600}})
	case r.URL.Path == "/v1/secret/data/fleet/lab/registry/device-pull/hub-pull":
		reply(http.StatusOK, map[string]any{"data": map[string]any{"data": map[string]any{"registry": "hub.example:5000", "username": "puller", "password": "pull-pass"}, "metadata": map[string]any{"version": 1}}})
	case r.URL.Path != "/v1/secret/data/lab/db":
		reply(http.StatusNotFound, map[string]any{"errors": []string{}})
	case mode == baoForbidden:
		reply(http.StatusForbidden, map[string]any{"errors": []string{"permission denied"}})
	case mode == baoMissingKey:
		reply(http.StatusOK, map[string]any{"data": map[string]any{"data": map[string]any{"user": "app"}, "metadata": map[string]any{"version": 1}}})
	default:
		reply(http.StatusOK, map[string]any{"data": map[string]any{"data": map[string]any{"password": secretValue}, "metadata": map[string]any{"version": 1}}})
	}
}

// deviceSecrets is the production secret source (openbao.DeviceSecrets)
// pointed at addr; its HTTP client gives up after a short while, so that a
// server that hangs is a timeout.
func deviceSecrets(t *testing.T, addr string) *openbao.DeviceSecrets {
	t.Helper()
	c, err := openbao.New(openbao.Config{Address: addr, Role: "fleet-device-lab", HTTPClient: &http.Client{Timeout: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := openbao.NewDeviceSecrets(c, func(context.Context) (string, error) { return "device-id-token", nil }, "fleet/lab")
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// refusedAddress is the address of a port nothing listens on.
func refusedAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestTransientSecretSourceFailuresAreRetriedDefiniteAnswersFail(t *testing.T) {
	tests := []struct {
		name string
		mode baoMode
		// refused: OpenBao's address refuses connections.
		refused bool
		want    events.WorkloadPhase
		// recovers: once the server answers again, the agent converges by
		// itself, with no new intent.
		recovers bool
	}{
		{name: "a sealed OpenBao (503) leaves the Deployment pending until it is unsealed", mode: baoSealed, want: events.WorkloadPending, recovers: true},
		{name: "a login answered with 503 leaves the Deployment pending until OpenBao answers", mode: baoLoginSealed, want: events.WorkloadPending, recovers: true},
		{name: "an OpenBao that times out leaves the Deployment pending until it answers", mode: baoHangs, want: events.WorkloadPending, recovers: true},
		{name: "a refused connection to OpenBao is the secret source's, not the engine's", refused: true, want: events.WorkloadPending},
		{name: "a secret without the key fails the Deployment", mode: baoMissingKey, want: events.WorkloadFailed},
		{name: "a permission denied (403) fails the Deployment", mode: baoForbidden, want: events.WorkloadFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bao, srv := startBao(t, tt.mode)
			addr := srv.URL
			if tt.refused {
				addr = refusedAddress(t)
			}
			e := startAgent(t, func(o *agent.Options) { o.Reconciler.Secrets = deviceSecrets(t, addr) })
			e.put(entry(t, 1, baseScore()))
			st := e.waitStatus(1, tt.want)
			if strings.Contains(st.Error, secretValue) || strings.Contains(st.Error, "s.device-token") || strings.Contains(st.Error, "device-id-token") {
				t.Errorf("the report holds a secret: %q", st.Error)
			}
			switch tt.want {
			case events.WorkloadPending:
				if !strings.HasPrefix(st.Error, "secret source unavailable, retrying: ") {
					t.Errorf("pending report %q does not name the secret source", st.Error)
				}
				if strings.Contains(st.Error, "container engine") {
					t.Errorf("pending report %q blames the container engine", st.Error)
				}
			case events.WorkloadFailed:
				if strings.Contains(st.Error, "unavailable") {
					t.Errorf("failed report %q says something is unavailable", st.Error)
				}
			}
			if tt.recovers {
				bao.mode.Store(int32(baoOK))
				e.waitStatus(1, events.WorkloadConverged)
			}
			if tt.want == events.WorkloadPending {
				for _, s := range e.statuses() {
					if s.Phase == events.WorkloadFailed {
						t.Errorf("a failure was reported while the secret source was unavailable: %+v", s)
					}
				}
			}
		})
	}
}

// TestAnUnavailableSecretSourceForAPullSecretIsRetried: the pull secret
// of a missing image is read from the same source; a sealed OpenBao makes
// the Deployment wait, not fail, and the pull happens once it answers.
func TestAnUnavailableSecretSourceForAPullSecretIsRetried(t *testing.T) {
	bao, srv := startBao(t, baoSealed)
	e := startAgent(t, func(o *agent.Options) { o.Reconciler.Credentials = deviceSecrets(t, srv.URL) })
	s := baseScore()
	s.Data.Services[0].Image = "hub.example:5000/private/api@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	s.Data.Services[0].ImagePullSecret = "hub-pull"
	e.put(entry(t, 1, s))
	st := e.waitStatus(1, events.WorkloadPending)
	if !strings.HasPrefix(st.Error, "secret source unavailable, retrying: ") || strings.Contains(st.Error, "container engine") {
		t.Errorf("pending report %q does not name the secret source alone", st.Error)
	}
	bao.mode.Store(int32(baoOK))
	e.waitStatus(1, events.WorkloadConverged)
	for _, s := range e.statuses() {
		if s.Phase == events.WorkloadFailed {
			t.Errorf("a failure was reported while the secret source was unavailable: %+v", s)
		}
		if strings.Contains(s.Error, "pull-pass") {
			t.Errorf("a report holds the pull secret's password: %q", s.Error)
		}
	}
}

package operator_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

// presenceEnv is the auth chain, an API server and operators that follow
// the device connections (ADR 0032).
type presenceEnv struct {
	t    *testing.T
	ctx  context.Context
	c    client.WithWatch
	ns   string
	env  *callouttest.Env
	keys map[string]*credential.KeyFile
	run  func(ctx context.Context) error
}

func newPresenceEnv(t *testing.T, staleAfter time.Duration) *presenceEnv {
	_, srv, c, ns := cluster(t, "presence")
	// Longer than cluster's: the test restarts an operator.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	e := &presenceEnv{t: t, ctx: ctx, c: c, ns: ns, env: callouttest.Start(t), keys: map[string]*credential.KeyFile{}}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e.run = func(ctx context.Context) error {
		nc, err := nats.Connect(e.env.NATS.ClientURL(), nats.UserInfo(authcallout.PresenceUser, os.Getenv("FLEET_PRESENCE_PASSWORD")),
			nats.CustomInboxPrefix(authcallout.InboxPrefix(authcallout.PresenceUser)), nats.MaxReconnects(-1))
		if err != nil {
			return err
		}
		defer nc.Close()
		return operator.Run(ctx, operator.Options{RESTConfig: srv.RESTConfig(), Store: e.env.Store, Reader: e.env.Store, IntentKV: e.env.Intent,
			Devices: e.env.Store, StaleAfter: staleAfter, Logger: logger, SeveralPerProcess: true, Presence: nc})
	}
	return e
}

// start runs an operator until stop is called or the test ends.
func (e *presenceEnv) start() (stop func()) {
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- e.run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				e.t.Errorf("operator: %v", err)
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// device enrolls a device and creates its Device.
func (e *presenceEnv) device(name string) string {
	e.t.Helper()
	id := e.ns + "-" + name
	k, err := credential.ReadKeyFile(e.env.EnrollDevice(e.t, id))
	if err != nil {
		e.t.Fatal(err)
	}
	e.keys[id] = &k
	d := &fleetv1.Device{ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: e.ns}, Spec: fleetv1.DeviceSpec{IdentitySubject: k.UserID}}
	if err := e.c.Create(e.ctx, d); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// connect connects device as the agent does, without running the agent:
// no heartbeat is ever sent.
func (e *presenceEnv) connect(id string, opts ...nats.Option) *agent.DeviceConn {
	e.t.Helper()
	dc, err := agent.Connect(e.ctx, agent.ConnectOptions{URL: e.env.NATS.ClientURL(), Key: e.keys[id], Device: id, NATSOptions: opts})
	if err != nil {
		e.t.Fatalf("connect %s: %v", id, err)
	}
	e.t.Cleanup(dc.Close)
	return dc
}

// liveness waits until the Device's liveness and Online reason are want.
func (e *presenceEnv) liveness(id string, want fleetv1.Liveness, reason string) {
	e.t.Helper()
	testenv.EventuallyErr(e.t, fmt.Sprintf("%s %s (%s)", id, want, reason), 2*time.Minute, func() error {
		var d fleetv1.Device
		if err := e.c.Get(e.ctx, types.NamespacedName{Namespace: e.ns, Name: id}, &d); err != nil {
			return err
		}
		got := ""
		for _, c := range d.Status.Conditions {
			if c.Type == fleetv1.ConditionOnline {
				got = c.Reason
			}
		}
		if d.Status.Liveness != want || got != reason {
			return fmt.Errorf("liveness %q reason %q", d.Status.Liveness, got)
		}
		return nil
	})
}

// TestAConnectedDeviceIsOnline: with the servers' view of the connections
// a device that never heartbeats is Online while connected and Stale
// stale-after after its connection went; another device's client name
// never makes it Online; an operator restart re-learns the connections.
func TestAConnectedDeviceIsOnline(t *testing.T) {
	e := newPresenceEnv(t, 3*time.Second)
	a, b, c := e.device("a"), e.device("b"), e.device("c")
	stop := e.start()
	e.connect(b, nats.Name(a)) // the attack: b names itself a
	e.liveness(b, fleetv1.LivenessOnline, fleetv1.ReasonConnected)
	ca := e.connect(a)
	e.liveness(a, fleetv1.LivenessOnline, fleetv1.ReasonConnected)
	ca.Close()
	e.liveness(a, fleetv1.LivenessStale, fleetv1.ReasonDisconnected)

	// An operator restart (or a failover): c connects while none runs.
	stop()
	e.connect(c)
	e.start()
	e.liveness(c, fleetv1.LivenessOnline, fleetv1.ReasonConnected)
	e.liveness(b, fleetv1.LivenessOnline, fleetv1.ReasonConnected)
	e.liveness(a, fleetv1.LivenessStale, fleetv1.ReasonDisconnected)
}

package scalebench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/internal/natsembed"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

// randomToken is 128 random bits in hex.
func randomToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// controlPlane is what the parent process runs: the embedded server with
// the documented callout configuration, the development OpenID Provider,
// the auth callout, the operator's connection and event store, and the
// operator's RolloutRunner (with Deployment status going nowhere: no
// Kubernetes API server runs).
type controlPlane struct {
	srv      *natsembed.Server
	sec      *secrets
	provider *devop.Provider
	// admin is the operator's connection (role fleet-operator); store and
	// the buckets are on it; the runner uses it.
	admin    *nats.Conn
	store    *events.Store
	identity jetstream.KeyValue
	intent   jetstream.KeyValue
	// monitor is a second operator-role connection the measurements
	// subscribe on, so that observing never slows the runner's connection;
	// monitorJS reads stream figures on it.
	monitor   *nats.Conn
	monitorJS jetstream.JetStream
	// status receives the rollout runner's Deployment status patches;
	// runnerSkips counts the records the runner skipped as undecodable.
	status      *statusSink
	runnerSkips *events.SkipCounter
	// floorPub is the floor's publisher (static floor user, no callout).
	floorPub *nats.Conn
	floorJS  jetstream.JetStream
	floorKV  jetstream.KeyValue

	conns  []*nats.Conn
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex // guards errs
	errs   []error
	// failed is closed when the first component fails.
	failed     chan struct{}
	failedOnce sync.Once
}

// runnerStatusInterval is the rollout runner's least time between two
// status patches of one Deployment (its default).
const runnerStatusInterval = 2 * time.Second

// floorBucket is the raw floor's KV bucket: configured like fleet-intent.
const floorBucket = "scalebench-floor"

// startControlPlane starts everything the parent runs; stop undoes it.
func startControlPlane(ctx context.Context, o Options, storeDir string) (cp *controlPlane, err error) {
	cp = &controlPlane{failed: make(chan struct{}), status: newStatusSink(), runnerSkips: events.NewSkipCounter()}
	defer func() {
		if err != nil {
			cp.stop()
		}
	}()
	if cp.sec, err = newSecrets(); err != nil {
		return nil, err
	}
	conf, err := serverConfig(cp.sec)
	if err != nil {
		return nil, err
	}
	sync := natsembed.DefaultSync
	if o.FastSync {
		sync = natsembed.FastSync
	}
	if cp.srv, err = natsembed.Start(natsembed.Options{Config: conf, StoreDir: storeDir, Port: -1, ServerName: "scalebench",
		Sync: sync, Logger: o.Logger.With("component", "nats")}); err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	url := cp.srv.ClientURL()
	rctx, cancel := context.WithCancel(context.Background())
	cp.cancel = cancel

	if cp.provider, err = devop.New(devop.Options{TokenLifetime: o.TokenLifetime, Logger: o.Logger.With("component", "oidc")}); err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	cp.run(rctx, "oidc", cp.provider.Run)

	calloutNC, err := cp.connect(url, nats.UserInfo("fleet-authcallout", cp.sec.calloutPassword), nats.Name("fleet-authcallout"))
	if err != nil {
		return nil, err
	}
	readerNC, err := cp.connect(url, nats.UserInfo("fleet-identity-reader", cp.sec.readerPassword),
		nats.CustomInboxPrefix("_INBOX_fleet-identity-reader"), nats.Name("fleet-identity-reader"))
	if err != nil {
		return nil, err
	}
	sysNC, err := cp.connect(url, nats.UserInfo("fleet-authcallout-sys", cp.sec.sysPassword),
		nats.CustomInboxPrefix("_INBOX_fleet-authcallout-sys"), nats.Name("fleet-authcallout-sys"))
	if err != nil {
		return nil, err
	}
	rjs, err := jetstream.New(readerNC)
	if err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	verifier, err := authcallout.NewVerifier(authcallout.VerifierOptions{Issuer: cp.provider.Issuer(), Audience: cp.provider.Audience()})
	if err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	svc, err := authcallout.New(authcallout.Options{
		Conn: calloutNC, Issuer: cp.sec.issuer, XKey: cp.sec.xkey, Account: authcallout.AccountFleet, DeviceAccount: authcallout.AccountDevices, Verifier: verifier,
		Identities: authcallout.NewKVIdentities(rjs), Watch: readerNC, System: sysNC,
		Logger: o.Logger.With("component", "authcallout"),
	})
	if err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	cp.run(rctx, "authcallout", svc.Run)
	select {
	case <-svc.Ready():
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		return nil, errors.New("scalebench: the auth callout did not subscribe within 30s")
	}

	if cp.admin, err = cp.controlPlaneConn(ctx, url, "fleet-operator"); err != nil {
		return nil, err
	}
	if cp.monitor, err = cp.controlPlaneConn(ctx, url, "scalebench-monitor"); err != nil {
		return nil, err
	}
	if cp.monitorJS, err = jetstream.New(cp.monitor); err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	if cp.store, err = events.NewStore(cp.admin, events.StoreOptions{Logger: o.Logger}); err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
	defer pcancel()
	if err := events.Provision(pctx, cp.store.JetStream(), events.ProvisionOptions{}); err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	if cp.intent, err = cp.store.JetStream().KeyValue(pctx, events.BucketIntent); err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	if cp.identity, err = cp.store.JetStream().KeyValue(pctx, events.BucketIdentity); err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}

	// The raw floor's bucket, configured like fleet-intent, and its
	// publisher: a plain client (static user, no callout).
	if cp.floorPub, err = cp.connect(url, nats.UserInfo(floorUser, cp.sec.floorPassword), nats.Name("scalebench-floor-publisher")); err != nil {
		return nil, err
	}
	if cp.floorJS, err = jetstream.New(cp.floorPub, jetstream.WithPublishAsyncMaxPending(4000)); err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	fcfg := events.KeyValueConfigs(events.ProvisionOptions{})[0]
	fcfg.Bucket, fcfg.Description = floorBucket, "scalebench raw floor: plain KV puts to plain subscribers"
	if cp.floorKV, err = cp.floorJS.CreateOrUpdateKeyValue(pctx, fcfg); err != nil {
		return nil, fmt.Errorf("scalebench: floor bucket: %w", err)
	}

	// The operator's rollout runner: it folds the revision, writes every
	// device's fleet-intent value and appends the rollout transitions.
	runner := &operator.RolloutRunner{Store: cp.store, Reader: cp.store, KV: cp.intent, Client: cp.status,
		Log: o.Logger.With("component", "rollouts"), Skips: cp.runnerSkips, StatusInterval: runnerStatusInterval}
	cp.run(rctx, "rollout runner", runner.Run)
	return cp, nil
}

// run starts a component; its failure is recorded for stop.
func (cp *controlPlane) run(ctx context.Context, name string, fn func(context.Context) error) {
	cp.wg.Go(func() {
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			cp.mu.Lock()
			cp.errs = append(cp.errs, fmt.Errorf("%s: %w", name, err))
			cp.mu.Unlock()
			cp.failedOnce.Do(func() { close(cp.failed) })
		}
	})
}

// failure returns the components' failures so far.
func (cp *controlPlane) failure() error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return errors.Join(cp.errs...)
}

func (cp *controlPlane) connect(url string, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(url, append(opts, nats.MaxReconnects(-1))...)
	if err != nil {
		return nil, fmt.Errorf("scalebench: connect: %w", err)
	}
	cp.conns = append(cp.conns, nc)
	return nc, nil
}

// controlPlaneConn creates a machine user with the fleet-operator role and
// connects it through the callout with its token callback.
func (cp *controlPlane) controlPlaneConn(ctx context.Context, url, name string) (*nats.Conn, error) {
	uid, err := cp.provider.CreateMachineUser(ctx, name, authcallout.RoleOperator)
	if err != nil {
		return nil, fmt.Errorf("scalebench: machine user %s: %w", name, err)
	}
	kf, err := cp.provider.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("scalebench: machine key of %s: %w", name, err)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: cp.provider.Issuer(), Key: kf, Audience: cp.provider.Audience()})
	if err != nil {
		return nil, fmt.Errorf("scalebench: %s: %w", name, err)
	}
	return cp.connect(url, nats.TokenHandler(src.TokenHandler(0)), nats.CustomInboxPrefix(authcallout.InboxPrefix(uid)),
		nats.Name(name), nats.Timeout(10*time.Second))
}

// stop stops the components, closes the connections and shuts the server
// down. Calling it twice is harmless.
func (cp *controlPlane) stop() {
	if cp.cancel != nil {
		cp.cancel()
	}
	cp.wg.Wait()
	for _, nc := range cp.conns {
		nc.Close()
	}
	cp.conns = nil
	if cp.srv != nil {
		cp.srv.Shutdown()
	}
}

// statusSink stands for the Kubernetes client of the rollout runner: the
// benchmark runs no API server, so Deployment status patches are recorded
// (the figures the runner would have shown: its counts) and dropped (the
// runner coalesces them to one per Deployment every 2 s; they are off the
// path from revision to convergence). Any other call panics (nil embedded
// client): the runner makes none.
type statusSink struct {
	client.Client
	mu      sync.Mutex // guards the fields below
	byGen   map[int64]statusFigures
	last    time.Time // when the last status was applied
	applied chan struct{}
}

// statusFigures are what the runner's statuses of one revision showed.
type statusFigures struct {
	// Applies counts the statuses; MaxFailed is the largest failed count
	// among them; Failure is the last latestFailure shown (nil: none).
	Applies   int
	MaxFailed int
	Failure   *fleetv1.DeviceFailure
	// Last is the last status applied.
	Last fleetv1.DeploymentStatus
}

func newStatusSink() *statusSink {
	return &statusSink{byGen: map[int64]statusFigures{}, applied: make(chan struct{}, 1)}
}

// Status returns a writer that records and drops status applies.
func (s *statusSink) Status() client.SubResourceWriter { return droppedStatus{sink: s} }

// record keeps what a status shows, by the generation of its revision.
func (s *statusSink) record(st fleetv1.DeploymentStatus) {
	if st.Revision == nil {
		return
	}
	s.mu.Lock()
	f := s.byGen[st.Revision.Generation]
	f.Applies++
	f.MaxFailed = max(f.MaxFailed, int(st.Counts.Failed))
	if st.LatestFailure != nil {
		f.Failure = st.LatestFailure
	}
	f.Last = st
	s.byGen[st.Revision.Generation] = f
	s.last = time.Now()
	s.mu.Unlock()
	select {
	case s.applied <- struct{}{}:
	default:
	}
}

// figures returns what the statuses of generation showed so far.
func (s *statusSink) figures(generation int64) statusFigures {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byGen[generation]
}

// awaitAfter waits until a status is applied after t, at most timeout; it
// reports whether one was.
func (s *statusSink) awaitAfter(ctx context.Context, t time.Time, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		after := s.last.After(t)
		s.mu.Unlock()
		if after {
			return true
		}
		select {
		case <-s.applied:
		case <-deadline.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

type droppedStatus struct {
	client.SubResourceWriter
	sink *statusSink
}

// Apply records the Deployment status and drops it.
func (d droppedStatus) Apply(_ context.Context, obj runtime.ApplyConfiguration, _ ...client.SubResourceApplyOption) error {
	u, ok := obj.(interface{ UnstructuredContent() map[string]any })
	if !ok {
		return nil
	}
	raw, found, err := unstructured.NestedMap(u.UnstructuredContent(), "status")
	if err != nil || !found {
		return nil
	}
	var st fleetv1.DeploymentStatus
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st); err != nil {
		return fmt.Errorf("scalebench: status: %w", err)
	}
	d.sink.record(st)
	return nil
}

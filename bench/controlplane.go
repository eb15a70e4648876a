package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/controlplane"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natscluster"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
)

// randomToken is 128 random bits in hex.
func randomToken() string {
	t, err := controlplane.RandomPassword()
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return t
}

// controlPlane is what the parent process runs: the control plane
// (controlplane: the embedded server with the documented callout
// configuration plus the floor user, the development OpenID Provider, the
// auth callout, the operator's connection, event store and buckets) and
// the benchmark's own parts: the monitor connection, the raw floor's
// publisher and bucket, and the operator's RolloutRunner (with Deployment
// status written to a recorder: no Kubernetes API server runs).
type controlPlane struct {
	plane *controlplane.Plane
	// servers are the NATS servers: the plane's embedded one, or cluster's
	// processes (Options.Servers).
	servers fleetServers
	cluster *natscluster.Cluster
	sec     *secrets
	// store and the bucket are on the operator's connection (role
	// fleet-operator); the runner uses it.
	store  *events.Store
	intent jetstream.KeyValue
	// monitor is the connection the measurements subscribe on, apart from
	// the runner's so that observing never slows it; monitorJS reads
	// stream figures on it. It is the static floor user's, not a machine
	// identity's: the callout would close it whenever its user JWT
	// expires (Options.TokenLifetime), and a measurement that misses what
	// devices publish while it reconnects would wait for reports it was
	// never given.
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
	// failed is closed when a component fails (or the plane stops).
	failed <-chan struct{}
	// callout counts the callout replicas' authorisations.
	callout *calloutCounter
}

// runnerStatusInterval is the rollout runner's least time between two
// status patches of one Deployment (its default).
const runnerStatusInterval = 2 * time.Second

// floorBucket is the raw floor's KV bucket: configured like fleet-intent
// (its values republished to floorStoredPrefix+<device> once stored).
const floorBucket = "scalebench-floor"

// floorStoredPrefix is where the floor bucket republishes its values.
const floorStoredPrefix = "bench.floor.stored."

// startControlPlane starts everything the parent runs; stop undoes it.
func startControlPlane(ctx context.Context, o Options, storeDir string) (*controlPlane, error) {
	cp := &controlPlane{sec: newSecrets(), status: newStatusSink(), runnerSkips: events.NewSkipCounter()}
	policy := natsembed.DefaultSync
	if o.FastSync {
		policy = natsembed.FastSync
	}
	po := controlplane.Options{
		StoreDir: storeDir, Port: -1, ServerName: "scalebench", Sync: policy, Logger: o.Logger,
		StaticUser: cp.sec.staticUser(), TokenLifetime: o.TokenLifetime,
		CalloutMetrics: authcallout.NewMetrics(),
	}
	var err error
	if cp.callout, err = newCalloutCounter(po.CalloutMetrics); err != nil {
		return nil, err
	}
	if o.Servers > 0 {
		if err := cp.startCluster(ctx, o, storeDir, &po); err != nil {
			return nil, err
		}
	}
	if cp.plane, err = controlplane.Start(ctx, po); err != nil {
		cp.stop()
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	if cp.cluster != nil {
		cp.servers = newClusterServers(cp.cluster)
	} else {
		cp.servers = embeddedServer{srv: cp.plane.Server()}
	}
	if err := cp.startOwnParts(ctx, o); err != nil {
		cp.stop()
		return nil, err
	}
	return cp, nil
}

// startCluster starts Options.Servers nats-server processes with the
// configuration the plane's secrets and the floor user make, and points po
// at them: R3 streams and buckets from three servers on (as production
// runs them), two callout replicas in this process (production runs two).
func (cp *controlPlane) startCluster(ctx context.Context, o Options, storeDir string, po *controlplane.Options) error {
	secrets, err := controlplane.NewSecrets()
	if err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}
	conf, err := secrets.ServerConfig(po.StaticUser)
	if err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}
	sync := ""
	if o.FastSync {
		sync = "2m"
	}
	if cp.cluster, err = natscluster.Start(ctx, natscluster.Options{N: o.Servers, Dir: storeDir, Config: conf, SyncInterval: sync, Profile: true,
		MemoryLimit: o.ServerMemoryLimit}); err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}
	po.Servers, po.Secrets, po.Replicas = cp.cluster.ClientURLs(), secrets, clusterCalloutReplicas
	po.Provision = events.ProvisionOptions{Replicas: cp.replicas()}
	return nil
}

// clusterCalloutReplicas is the number of callout replicas with
// Options.Servers (production's).
const clusterCalloutReplicas = 2

// replicas is the streams' and buckets' replica count: 3 on a cluster of
// at least 3 servers, else 1.
func (cp *controlPlane) replicas() int {
	if cp.cluster != nil && cp.cluster.N() >= 3 {
		return 3
	}
	return 1
}

// startOwnParts starts what the benchmark adds to the plane: the monitor
// connection, the floor's publisher and bucket, and the rollout runner.
func (cp *controlPlane) startOwnParts(ctx context.Context, o Options) error {
	var err error
	p := cp.plane
	cp.failed = p.Done()
	cp.store, cp.intent = p.Store(), p.Intent()
	if cp.monitor, err = nats.Connect(p.URL(), nats.UserInfo(floorUser, cp.sec.floorPassword), nats.Name("scalebench-monitor"),
		nats.MaxReconnects(-1)); err != nil {
		return fmt.Errorf("scalebench: connect the monitor: %w", err)
	}
	if cp.monitorJS, err = jetstream.New(cp.monitor); err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}

	// The raw floor's bucket, configured like fleet-intent, and its
	// publisher: a plain client (static user, no callout).
	if cp.floorPub, err = nats.Connect(p.URL(), nats.UserInfo(floorUser, cp.sec.floorPassword), nats.Name("scalebench-floor-publisher"),
		nats.MaxReconnects(-1)); err != nil {
		return fmt.Errorf("scalebench: connect the floor publisher: %w", err)
	}
	if cp.floorJS, err = jetstream.New(cp.floorPub, jetstream.WithPublishAsyncMaxPending(4000)); err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	fcfg := events.KeyValueConfigs(events.ProvisionOptions{Replicas: cp.replicas()})[0]
	fcfg.Bucket, fcfg.Description = floorBucket, "scalebench raw floor: plain KV puts to plain subscribers"
	// The floor's subscribers take the puts themselves (the core floor:
	// delivered as published, before the stream stores them) and their
	// republished copies (the stored floor: delivered once stored and
	// synced, as a device's value is).
	fcfg.RePublish = &jetstream.RePublish{Source: "$KV." + floorBucket + ".>", Destination: floorStoredPrefix + ">"}
	if cp.floorKV, err = cp.floorJS.CreateOrUpdateKeyValue(fctx, fcfg); err != nil {
		return fmt.Errorf("scalebench: floor bucket: %w", err)
	}

	// The operator's rollout runner: it folds the revision, writes every
	// device's fleet-intent value and appends the rollout transitions.
	runner := &operator.RolloutRunner{Store: cp.store, Reader: cp.store, KV: cp.intent, Status: cp.status,
		Log: o.Logger.With("component", "rollouts"), Skips: cp.runnerSkips, StatusInterval: runnerStatusInterval}
	p.Go("rollout runner", runner.Run)
	return nil
}

// failure returns the first component failure so far (nil: none).
func (cp *controlPlane) failure() error { return cp.plane.Err() }

// stop closes the floor publisher and the plane (every component joined,
// connections closed, server shut down). Calling it twice is harmless. A
// component failure was reported by failure during the run; one during
// the shutdown is not a result.
func (cp *controlPlane) stop() {
	if cp.floorPub != nil {
		cp.floorPub.Close()
	}
	if cp.plane != nil {
		_ = cp.plane.Close()
	}
	if cp.cluster != nil {
		cp.cluster.Close()
	}
}

// statusSink is the rollout runner's Deployment status writer: the
// benchmark runs no API server, so statuses are recorded (the figures the
// runner would have shown: its counts) and dropped (the runner coalesces
// them to one per Deployment every 2 s; they are off the path from revision
// to convergence).
type statusSink struct {
	mu      sync.Mutex // guards the fields below
	byGen   map[int64]statusFigures
	last    time.Time // when the last status was applied
	applied chan struct{}
}

// statusFigures are what the runner's statuses of one revision showed.
type statusFigures struct {
	// Applies counts the statuses; MaxFailed and MaxDegraded are the
	// largest failed and degraded counts among them; Failure is the last
	// latestFailure shown (nil: none).
	Applies     int
	MaxFailed   int
	MaxDegraded int
	Failure     *fleetv1.DeviceFailure
	// Last is the last status applied.
	Last fleetv1.DeploymentStatus
}

func newStatusSink() *statusSink {
	return &statusSink{byGen: map[int64]statusFigures{}, applied: make(chan struct{}, 1)}
}

// WriteDeploymentStatus records st and drops it.
func (s *statusSink) WriteDeploymentStatus(_ context.Context, _, _ string, st fleetv1.DeploymentStatus) error {
	s.record(st)
	return nil
}

// record keeps what a status shows, by the generation of its revision.
func (s *statusSink) record(st fleetv1.DeploymentStatus) {
	if st.Revision == nil {
		return
	}
	s.mu.Lock()
	f := s.byGen[st.Revision.Generation]
	f.Applies++
	f.MaxFailed = max(f.MaxFailed, int(st.Counts.Failed))
	f.MaxDegraded = max(f.MaxDegraded, int(st.Counts.Degraded), len(st.Degraded))
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

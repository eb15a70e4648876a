package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator/devices"
	"github.com/nationtech/harmony-fleet/operator/devices/presence"
	"github.com/nationtech/harmony-fleet/operator/exposureindex"
	"github.com/nationtech/harmony-fleet/operator/internal/leader"
	"github.com/nationtech/harmony-fleet/operator/policysync"
	"github.com/nationtech/harmony-fleet/operator/taskruns"
)

// Options configure the operator.
type Options struct {
	// Kubernetes API access.
	RESTConfig *rest.Config
	// Store is the event store (events.Store).
	Store EventStore
	// Reader reads events (events.Store).
	Reader EventReader
	// IntentKV is the fleet-intent bucket the rollout runner writes.
	IntentKV jetstream.KeyValue
	// Checkpoints, when set, holds the rollout runner's snapshot so a
	// restart resumes instead of folding every event again (bucket
	// events.BucketOperatorState). Nil: rebuild from zero at each start.
	Checkpoints jetstream.ObjectStore
	// StatusInterval is the least time between two status patches of one
	// Deployment by the rollout runner, and of one TaskRun by the TaskRun
	// runner. Default 2s.
	StatusInterval time.Duration
	// Groups is the device group source; nil: none (allowedGroups fails
	// closed).
	Groups GroupSource
	// Logger receives the operator's and controller-runtime's logs.
	Logger *slog.Logger
	// MetricsAddr serves Prometheus metrics; "0" (default) disables them.
	MetricsAddr string
	// HealthAddr serves /healthz and /readyz; "0" (default) disables them.
	HealthAddr string
	// OpenBao, when set, is OpenBao with an administrator's token: the
	// operator keeps each Deployment's pull-secret policy (policysync.Sync).
	// Nil: the sync is disabled and says so in a condition.
	OpenBao PolicyAdmin
	// OpenBaoNames are the paths and role names of the policy sync.
	OpenBaoNames PolicyNames
	// SeveralPerProcess allows more than one operator in one process (tests
	// that race operators); controller-runtime otherwise refuses duplicate
	// controller names because they would share metrics.
	SeveralPerProcess bool
	// Devices gives the Device controller device reports and the
	// fleet-identity bucket (an *events.Store); nil: it does not run.
	Devices DeviceStore
	// ExposureIndex, when set (an *events.Store), has the leader keep the
	// exposure index stream `fleet history exposure` reads (ADR 0033,
	// package exposureindex); nil: it does not run, and the question reads
	// every report.
	ExposureIndex history.IndexStore
	// StaleAfter is how long a device stays Online after its last
	// heartbeat, or after its last connection went when Presence is set;
	// 0: DefaultStaleAfter (90s).
	StaleAfter time.Duration
	// Presence, when set, is a connection of the system account's
	// fleet-presence user (authcallout.PresenceUser): the Device
	// controller then decides liveness from the servers' view of the
	// device connections, a connected device being Online (ADR 0032).
	// Nil: from heartbeats only (ADR 0024).
	Presence *nats.Conn
	// PresenceResync is how often the servers' connection lists are read
	// again; 0: presence.DefaultResync.
	PresenceResync time.Duration
	// PresenceStaleSilence is how long a device whose last connection a
	// server closed as stale (unanswered PINGs) had at least been silent
	// (presence.Options.StaleSilence; authcallout.StaleSilence for the
	// documented server configuration); 0: gone at the event.
	PresenceStaleSilence time.Duration
	// TargetTimeout is how long a frozen target may go without a result
	// of a revision after it was handed it before it is removed from the
	// revision's accounting; 0: DefaultTargetTimeout (1h).
	TargetTimeout time.Duration
	// ProgressDeadline is how long a rollout may make no progress before
	// its Progressing condition turns False (ProgressDeadlineExceeded), for
	// a Deployment without spec.rollout.progressDeadline; 0:
	// DefaultProgressDeadline (10m); negative: none.
	ProgressDeadline time.Duration
	// FollowDebounce is how long a target of a Follow Deployment (ADR
	// 0026) must not have matched after a label change before it leaves;
	// 0: DefaultFollowDebounce (30s).
	FollowDebounce time.Duration
	// Skips counts the stored records the operator's readers skip because
	// they do not decode (fleet_events_skipped_records_total). Run
	// registers it with controller-runtime's metrics registry
	// (metrics.Registry, served on MetricsAddr). Nil: one counter per
	// process (ProcessSkipCounter).
	Skips *events.SkipCounter
	// Metrics records what the controllers and the rollout runner do,
	// registered with controller-runtime's registry (served on
	// MetricsAddr). Nil: the metrics shared by the operators of this
	// process (ProcessMetrics).
	Metrics *Metrics
	// LeaderElection, when enabled, lets several operator replicas run
	// against one API server and one JetStream: only the holder of the
	// Lease runs the controllers and runners. Zero: disabled.
	LeaderElection LeaderElection
	// DeviceWorkers is how many Devices the Device controller reconciles at
	// once; 0: DefaultDeviceWorkers (8).
	DeviceWorkers int
	// EventStamp, when set, is applied last to every Deployment event the
	// operator builds (revisions, deletions, rollout requests and
	// transitions): tests that pin the bytes of those events set their id
	// and time with it (events.WithID, events.WithTime). Nil, always in
	// production: a new ULID and the current time.
	EventStamp events.Option
	// DeviceNow, when set, is the Device controller's clock (tests); nil:
	// time.Now.
	DeviceNow func() time.Time
}

// EventRecorderName is the reporting controller of the Kubernetes Events
// the operator writes on Fleet resources (events.k8s.io/v1).
const EventRecorderName = "fleet-operator"

// processSkips is the skip counter of operators started without one.
var processSkips = sync.OnceValue(events.NewSkipCounter)

// ProcessSkipCounter returns the skip counter operators of this process use
// when Options.Skips is nil.
func ProcessSkipCounter() *events.SkipCounter { return processSkips() }

// registerSkips registers the skip counter with controller-runtime's
// metrics registry. Registering the same counter again (a second operator
// in the process) is fine; another counter under the same name is not
// exported, and says so.
func registerSkips(c *events.SkipCounter, log *slog.Logger) error {
	err := metrics.Registry.Register(c.Collector())
	var are prometheus.AlreadyRegisteredError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &are):
		if are.ExistingCollector != c.Collector() {
			log.Info("another skipped-records counter is already registered in this process; this operator's counts are not exported",
				"metric", events.SkippedRecordsMetric)
		}
		return nil
	default:
		return fmt.Errorf("operator: register %s: %w", events.SkippedRecordsMetric, err)
	}
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.RESTConfig == nil {
		errs = append(errs, errors.New("operator: no Kubernetes configuration: pass --kubeconfig or run in a cluster"))
	}
	if o.Store == nil || o.Reader == nil || o.IntentKV == nil {
		errs = append(errs, errors.New("operator: no event store, reader or fleet-intent bucket: pass --nats-url"))
	}
	errs = append(errs, o.LeaderElection.Validate())
	return errors.Join(errs...)
}

// Scheme returns a scheme with the Fleet types.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := fleetv1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// Run runs the controllers until ctx ends, then returns after they stopped.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = "0"
	}
	if o.HealthAddr == "" {
		o.HealthAddr = "0"
	}
	if o.Skips == nil {
		o.Skips = ProcessSkipCounter()
	}
	if err := registerSkips(o.Skips, o.Logger); err != nil {
		return err
	}
	if o.Metrics == nil {
		o.Metrics = ProcessMetrics()
	}
	if err := o.Metrics.Register(o.Logger); err != nil {
		return err
	}
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	mopts := ctrl.Options{
		Scheme:                 scheme,
		Logger:                 logr.FromSlogHandler(o.Logger.Handler()),
		Metrics:                metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress: o.HealthAddr,
		Controller:             config.Controller{SkipNameValidation: &o.SeveralPerProcess},
	}
	if le := o.LeaderElection.WithDefaults(); le.Enabled {
		// Every runnable added below is leader-only: the controllers (the
		// default of controller-runtime) and the runners and telemetry
		// consumer (leader.Only). The caches, metrics and health serve on
		// every replica, and so does the fleet_operator_leader goroutine
		// below (it reports 0 on a follower). The Lease is released on a clean stop, after the
		// runnables stopped: Run returns only then.
		mopts.LeaderElection = true
		mopts.LeaderElectionID = LeaseName
		mopts.LeaderElectionNamespace = le.Namespace
		mopts.LeaderElectionResourceLock = "leases"
		mopts.LeaderElectionReleaseOnCancel = true
		mopts.LeaseDuration, mopts.RenewDeadline, mopts.RetryPeriod = &le.LeaseDuration, &le.RenewDeadline, &le.RetryPeriod
	}
	mgr, err := ctrl.NewManager(o.RESTConfig, mopts)
	if err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	dr := &DeploymentReconciler{Client: mgr.GetClient(), Store: o.Store, Reader: o.Reader, Groups: o.Groups, WaitForPolicy: o.OpenBao != nil,
		Log: o.Logger.With("controller", "deployment"), Skips: o.Skips, Metrics: o.Metrics.Deployments, Stamp: o.EventStamp}
	if err := dr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	ra := &RolloutActions{Client: mgr.GetClient(), Store: o.Store, Reader: o.Reader, Recorder: mgr.GetEventRecorder(EventRecorderName),
		Log: o.Logger.With("controller", "rollout-actions"), Skips: o.Skips, Stamp: o.EventStamp}
	if err := ra.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	ps := &policysync.Sync{Client: mgr.GetClient(), Admin: o.OpenBao, Names: o.OpenBaoNames, Log: o.Logger.With("controller", "openbao-policy")}
	if err := ps.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	removals := make(chan TargetRemoval, 1024)
	tw := &TargetWatch{Client: mgr.GetClient(), Out: removals}
	if err := tw.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	follows := make(chan FollowChange, 1024)
	fw := &FollowWatch{Client: mgr.GetClient(), Groups: o.Groups, Out: follows}
	if err := fw.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	runner := &RolloutRunner{Store: o.Store, Reader: o.Reader, KV: o.IntentKV, Status: KubeStatus{Client: mgr.GetClient()},
		Log: o.Logger.With("component", "rollouts"), StatusInterval: o.StatusInterval, Checkpoints: o.Checkpoints, Skips: o.Skips,
		Metrics: o.Metrics.Rollouts, TargetTimeout: o.TargetTimeout, ProgressDeadline: o.ProgressDeadline, Removals: removals,
		Follows: follows, FollowDebounce: o.FollowDebounce,
		Stamp: o.EventStamp}
	if err := mgr.Add(leader.Only(runner.Run)); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	tr := &taskruns.Reconciler{Client: mgr.GetClient(), Store: o.Store, Reader: o.Reader, Groups: o.Groups,
		Log: o.Logger.With("controller", "taskrun"), Skips: o.Skips}
	if err := tr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	tasks := &taskruns.Runner{Reader: o.Reader, Status: taskruns.KubeStatus{Client: mgr.GetClient()}, Log: o.Logger.With("component", "taskruns"),
		StatusInterval: o.StatusInterval, Skips: o.Skips}
	if err := mgr.Add(leader.Only(tasks.Run)); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	if o.ExposureIndex != nil {
		ix := &exposureindex.Runner{Store: o.ExposureIndex, Log: o.Logger.With("component", "exposure-index"), Skips: o.Skips}
		if err := mgr.Add(leader.Only(ix.Run)); err != nil {
			return fmt.Errorf("operator: %w", err)
		}
	}
	if o.Devices != nil {
		dev := &devices.Reconciler{Client: mgr.GetClient(), Store: o.Devices, StaleAfter: o.StaleAfter, Log: o.Logger.With("controller", "device"),
			Skips: o.Skips, Metrics: o.Metrics.Devices, Workers: o.DeviceWorkers, Now: o.DeviceNow}
		if o.Presence != nil {
			tr, err := presence.New(presence.Options{Conn: o.Presence, Account: presence.DefaultAccount, Changed: dev.ConnectionChanged,
				Resync: o.PresenceResync, StaleSilence: o.PresenceStaleSilence, Log: o.Logger.With("component", "presence")})
			if err != nil {
				return fmt.Errorf("operator: %w", err)
			}
			dev.Connections = tr
		}
		if err := dev.SetupWithManager(mgr); err != nil {
			return fmt.Errorf("operator: %w", err)
		}
	}
	o.Logger.Info("operator starting", "leaderElection", o.LeaderElection.Enabled)
	stopped, done := make(chan struct{}), make(chan struct{})
	go func() { // fleet_operator_leader: 1 from election until the manager stops
		defer close(done)
		select {
		case <-mgr.Elected():
			if o.LeaderElection.Enabled {
				o.Logger.Info("leading: the controllers and runners start", "lease", LeaseName, "namespace", o.LeaderElection.Namespace)
			}
			o.Metrics.SetLeader(true)
			<-stopped
		case <-stopped:
		}
		o.Metrics.SetLeader(false)
	}()
	err = mgr.Start(ctx)
	close(stopped)
	<-done
	return err
}

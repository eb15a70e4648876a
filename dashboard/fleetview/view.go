package fleetview

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"sync/atomic"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Streams is what a live View needs of the event store: replays (history)
// and follows (the live heartbeat count, the change feed), both made by a
// projections/runner. *events.Store implements it.
type Streams interface {
	ReplaySubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error]
	FollowSubjects(ctx context.Context, filters []string, from events.Start) iter.Seq2[events.Record, error]
}

// Informers is what a live View needs of the informer cache to feed the
// change feed: an informer per kind to register handlers on.
// controller-runtime's cache.Cache implements it.
type Informers interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error)
}

// Options configure a live View.
type Options struct {
	// Cache reads Devices, Deployments and TaskRuns. It must be backed by
	// an informer cache (a manager's GetCache, or its client's reads): the
	// View lists on every page view. Required.
	Cache client.Reader
	// Informers feed the change feed with the cache's updates; nil: the
	// feed carries only the streams' changes.
	Informers Informers
	// Streams reads the event streams. Required.
	Streams Streams
	// Namespace restricts Deployments and TaskRuns to one namespace;
	// empty: all. Devices are always listed in every namespace (a device id
	// is unique across namespaces).
	Namespace string
	// OfflineAfter: a device whose last heartbeat is older is offline
	// rather than stale. Default DefaultOfflineAfter.
	OfflineAfter time.Duration
	// NeverConnectedAfter: a Device enrolled (created) longer ago that
	// has never sent a heartbeat raises a device-never-connected alert.
	// Default DefaultNeverConnectedAfter; the Prometheus rule
	// FleetDevicesNeverConnected uses the same grace (docs/alerts.md).
	NeverConnectedAfter time.Duration
	// MaxChangeRate bounds the change feed: at most this many Changes a
	// second per subscriber. Default DefaultMaxChangeRate.
	MaxChangeRate int
	// Logger: default discard.
	Logger *slog.Logger
	// Skips counts stream records skipped because they do not decode.
	// Nil-safe.
	Skips *events.SkipCounter
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Defaults.
const (
	DefaultOfflineAfter        = time.Hour
	DefaultNeverConnectedAfter = 10 * time.Minute
	DefaultMaxChangeRate       = 2
)

// Validate checks the options.
func (o Options) Validate() error {
	if o.Cache == nil {
		return fmt.Errorf("%w: Cache is nil: pass the manager's cache (mgr.GetCache())", ErrInvalidOptions)
	}
	if o.Streams == nil {
		return fmt.Errorf("%w: Streams is nil: pass an *events.Store on a connected client", ErrInvalidOptions)
	}
	if o.OfflineAfter < 0 {
		return fmt.Errorf("%w: OfflineAfter is %s: use a positive duration (default %s)", ErrInvalidOptions, o.OfflineAfter, DefaultOfflineAfter)
	}
	if o.NeverConnectedAfter < 0 {
		return fmt.Errorf("%w: NeverConnectedAfter is %s: use a positive duration (default %s)", ErrInvalidOptions, o.NeverConnectedAfter, DefaultNeverConnectedAfter)
	}
	if o.MaxChangeRate < 0 {
		return fmt.Errorf("%w: MaxChangeRate is %d: use a positive rate (default %d)", ErrInvalidOptions, o.MaxChangeRate, DefaultMaxChangeRate)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.OfflineAfter == 0 {
		o.OfflineAfter = DefaultOfflineAfter
	}
	if o.NeverConnectedAfter == 0 {
		o.NeverConnectedAfter = DefaultNeverConnectedAfter
	}
	if o.MaxChangeRate == 0 {
		o.MaxChangeRate = DefaultMaxChangeRate
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// objects lists the CRs a View shows. The live one reads the informer cache;
// the mock one generated objects.
type objects interface {
	devices(ctx context.Context) ([]fleetv1.Device, error)
	deployments(ctx context.Context) ([]fleetv1.Deployment, error)
	taskRuns(ctx context.Context) ([]fleetv1.TaskRun, error)
}

// historian answers from the streams. *history.History implements it.
type historian interface {
	Deployment(ctx context.Context, namespace, name string) (*history.DeploymentTimeline, error)
	Device(ctx context.Context, device string) (*history.DeviceTimeline, error)
	TaskRun(ctx context.Context, namespace, name string) (*history.TaskRunTimeline, error)
	FleetAt(ctx context.Context, t time.Time) (*history.FleetState, error)
}

// View serves the dashboard's read models. It implements Source. Run feeds
// its trend and change feed; the page reads work without it.
type View struct {
	o       Options
	objs    objects
	hist    historian
	streams Streams // nil for the mock
	run     func(ctx context.Context) error
	trend   *trendCounter
	hub     *hub
	// running is set by the first Run: a second would count the trend
	// twice.
	running atomic.Bool
	// memo keeps Deployment timelines while following is true (the live
	// View's Run follows the streams, so it sees every change); nil for
	// the mock.
	memo      *timelineMemo
	following atomic.Bool
}

// NewLive returns a View of a Fleet: the cache's CRs and the streams.
func NewLive(o Options) (*View, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	h, err := history.New(history.Options{Reader: o.Streams, Logger: o.Logger, Skips: o.Skips})
	if err != nil {
		return nil, fmt.Errorf("fleetview: %w", err)
	}
	v := &View{o: o, objs: cacheObjects{r: o.Cache, namespace: o.Namespace}, hist: h, streams: o.Streams,
		trend: newTrendCounter(), hub: newHub(), memo: newTimelineMemo()}
	v.hub.onPublish = v.memo.invalidate
	v.run = v.runLive
	return v, nil
}

// Run follows the streams and the informers to feed the trend and the
// change feed, until ctx ends; it returns once its goroutines stopped. It
// returns nil when ctx ends, an error when an informer cannot be watched
// (after stopping the rest). A stream follow that fails is logged and
// started again past its last record. Page reads work without Run; the
// trend and the change feed stay empty. A View runs once: a second Run
// returns ErrAlreadyRunning.
func (v *View) Run(ctx context.Context) error {
	if !v.running.CompareAndSwap(false, true) {
		return ErrAlreadyRunning
	}
	if v.run == nil {
		<-ctx.Done()
		return nil
	}
	return v.run(ctx)
}

// cacheObjects lists from an informer cache.
type cacheObjects struct {
	r         client.Reader
	namespace string
}

func (c cacheObjects) devices(ctx context.Context) ([]fleetv1.Device, error) {
	var l fleetv1.DeviceList
	if err := c.r.List(ctx, &l, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list Devices from the cache: %w", err)
	}
	return l.Items, nil
}

func (c cacheObjects) deployments(ctx context.Context) ([]fleetv1.Deployment, error) {
	var l fleetv1.DeploymentList
	if err := c.r.List(ctx, &l, client.InNamespace(c.namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list Deployments from the cache: %w", err)
	}
	return l.Items, nil
}

func (c cacheObjects) taskRuns(ctx context.Context) ([]fleetv1.TaskRun, error) {
	var l fleetv1.TaskRunList
	if err := c.r.List(ctx, &l, client.InNamespace(c.namespace), client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("list TaskRuns from the cache: %w", err)
	}
	return l.Items, nil
}

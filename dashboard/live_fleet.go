package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// FleetOptions configure RunFleet: a dashboard of a running Fleet.
type FleetOptions struct {
	// Server are the server's options; View, Actions and Acks are left
	// empty, RunFleet builds them.
	Server Options
	// RESTConfig reaches the Kubernetes API server. Required.
	RESTConfig *rest.Config
	// Store is the event store, on a connection with the operator's
	// identity (the dashboard appends to FLEET_COMMANDS and FLEET_AUDIT).
	// Required.
	Store *events.Store
	// Namespace restricts Deployments and TaskRuns to one namespace;
	// empty: all.
	Namespace string
	// NeverConnectedAfter is the read models' grace before an enrolled
	// Device that never sent a heartbeat is an alert; 0: the default
	// (fleetview.DefaultNeverConnectedAfter).
	NeverConnectedAfter time.Duration
	// LogsMetrics count the device log streams the dashboard opens and
	// the devices it cuts off (ADR 0025), when Server.Logs is not given;
	// nil: not counted.
	LogsMetrics *devicelogs.Metrics
	// Ready, when set, is called with the server once the cache has
	// synced, before it serves.
	Ready func(*Server)
	// Serving, when set, is called once the dashboard serves, after its
	// "dashboard serving" record: a caller that prints a banner waits for
	// it, so no startup record follows the banner.
	Serving func()
}

// RunFleet serves the dashboard of a Fleet on ln until ctx ends: an informer
// cache of Devices, Deployments and TaskRuns, the live read models over it
// and the streams, the live Actions and the acknowledgements of FLEET_AUDIT.
// It returns after every part stopped; it owns ln.
func RunFleet(ctx context.Context, o FleetOptions, ln net.Listener) error {
	if o.RESTConfig == nil || o.Store == nil {
		ln.Close()
		return fmt.Errorf("%w: RunFleet needs a Kubernetes configuration and an event store", ErrInvalidOptions)
	}
	log := o.Server.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	scheme := runtime.NewScheme()
	if err := fleetv1.AddToScheme(scheme); err != nil {
		ln.Close()
		return err
	}
	c, err := cache.New(o.RESTConfig, cache.Options{Scheme: scheme})
	if err != nil {
		ln.Close()
		return fmt.Errorf("dashboard: informer cache: %w", err)
	}
	kube, err := client.New(o.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		ln.Close()
		return fmt.Errorf("dashboard: kubernetes client: %w", err)
	}
	identity, err := o.Store.JetStream().KeyValue(ctx, events.BucketIdentity)
	if err != nil {
		ln.Close()
		return fmt.Errorf("dashboard: open the %s bucket (provision the streams): %w", events.BucketIdentity, err)
	}
	if _, err := o.Store.JetStream().Stream(ctx, events.StreamAudit); errors.Is(err, jetstream.ErrStreamNotFound) {
		ln.Close()
		return fmt.Errorf("dashboard: the %s stream does not exist: provision the streams (fleet-operator --provision)", events.StreamAudit)
	}
	view, err := fleetview.NewLive(fleetview.Options{Cache: c, Informers: c, Streams: o.Store, Namespace: o.Namespace,
		NeverConnectedAfter: o.NeverConnectedAfter, Logger: log.With("component", "fleetview")})
	if err != nil {
		ln.Close()
		return err
	}
	actions, err := NewFleetActions(kube, o.RESTConfig, o.Store, identity, log)
	if err != nil {
		ln.Close()
		return err
	}
	acks, err := NewStreamAcks(o.Store, log)
	if err != nil {
		ln.Close()
		return err
	}
	so := o.Server
	so.View, so.Actions, so.Acks = view, actions, acks
	if so.Logs == nil {
		// Device logs and diagnoses through the same connection (ADR 0025).
		if so.Logs, err = devicelogs.New(devicelogs.Options{Conn: o.Store.JetStream().Conn(), Store: o.Store,
			Logger: log.With("component", "devicelogs"), Metrics: o.LogsMetrics}); err != nil {
			ln.Close()
			return err
		}
	}
	srv, err := New(so)
	if err != nil {
		ln.Close()
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return c.Start(gctx) })
	g.Go(func() error {
		if !c.WaitForCacheSync(gctx) {
			ln.Close()
			return gctx.Err()
		}
		g.Go(func() error { return view.Run(gctx) })
		if o.Ready != nil {
			o.Ready(srv)
		}
		return srv.run(gctx, ln, o.Serving)
	})
	err = g.Wait()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}

package operator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Options configure the operator.
type Options struct {
	// Kubernetes API access.
	RESTConfig *rest.Config
	// Store is the event store (events.Store).
	Store EventStore
	// Groups is the device group source; nil: none (allowedGroups fails
	// closed).
	Groups GroupSource
	// Logger receives the operator's and controller-runtime's logs.
	Logger *slog.Logger
	// MetricsAddr serves Prometheus metrics; "0" (default) disables them.
	MetricsAddr string
	// HealthAddr serves /healthz and /readyz; "0" (default) disables them.
	HealthAddr string
	// SeveralPerProcess allows more than one operator in one process (tests
	// that race operators); controller-runtime otherwise refuses duplicate
	// controller names because they would share metrics.
	SeveralPerProcess bool
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.RESTConfig == nil {
		errs = append(errs, errors.New("operator: no Kubernetes configuration: pass --kubeconfig or run in a cluster"))
	}
	if o.Store == nil {
		errs = append(errs, errors.New("operator: no event store: pass --nats-url"))
	}
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
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(o.RESTConfig, ctrl.Options{
		Scheme:                 scheme,
		Logger:                 logr.FromSlogHandler(o.Logger.Handler()),
		Metrics:                metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress: o.HealthAddr,
		Controller:             config.Controller{SkipNameValidation: &o.SeveralPerProcess},
	})
	if err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	dr := &DeploymentReconciler{Client: mgr.GetClient(), Store: o.Store, Groups: o.Groups, Log: o.Logger.With("controller", "deployment")}
	if err := dr.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	o.Logger.Info("operator starting")
	return mgr.Start(ctx)
}

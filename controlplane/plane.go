package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/devop"
)

// operatorName is the machine user (and client name) of the operator's
// connection.
const operatorName = "fleet-operator"

// startTimeout bounds each wait of Start: the callout replicas subscribing,
// provisioning.
const startTimeout = 30 * time.Second

// errClosed is the cause of the plane's context after Close.
var errClosed = errors.New("controlplane: closed")

// Plane is a running control plane. Its accessors return what Start made;
// Close stops it.
type Plane struct {
	o        Options
	log      *slog.Logger
	conf     string
	secrets  *Secrets
	server   *natsembed.Server
	provider *devop.Provider
	verifier *authcallout.Verifier
	replicas []*authcallout.Replica
	operator *nats.Conn
	store    *events.Store
	intent   jetstream.KeyValue
	identity jetstream.KeyValue

	// ctx is the group's: done when a part fails or Close cancels it.
	ctx    context.Context
	cancel context.CancelCauseFunc
	group  *errgroup.Group

	mu     sync.Mutex // guards the fields below
	closed bool
	conns  []*nats.Conn // made by connect, closed by Close in reverse order
}

// Start starts a plane: the server, the provider, the callout replicas
// (waiting until they subscribe), the operator's connection and store, and
// provisions the streams and buckets. ctx bounds the start only: the plane
// runs until Close (or until a part fails: Done). On an error Start undoes
// what it did.
func Start(ctx context.Context, o Options) (*Plane, error) {
	if err := o.Validate(); err != nil {
		if o.ProviderListener != nil {
			_ = o.ProviderListener.Close()
		}
		return nil, err
	}
	if !o.ExternalCallout {
		o.Replicas = max(o.Replicas, 1)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Plane{o: o, log: o.Logger, secrets: o.Secrets}
	runCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.group, p.ctx = errgroup.WithContext(runCtx)
	if err := p.start(ctx); err != nil {
		// A part's failure may be what err already says.
		if cerr := p.Close(); cerr != nil && !errors.Is(err, cerr) {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	return p, nil
}

// start starts the parts in order; Start closes the plane when it fails.
func (p *Plane) start(ctx context.Context) error {
	// The provider's listener is devop's from New on, even on an error.
	ln := p.o.ProviderListener
	p.o.ProviderListener = nil
	if err := p.startServer(); err != nil {
		if ln != nil {
			_ = ln.Close()
		}
		return err
	}
	var err error
	if p.provider, err = devop.New(devop.Options{SigningKey: p.o.SigningKey, TokenLifetime: p.o.TokenLifetime,
		Listener: ln, Issuer: p.o.ProviderIssuer, AdminToken: p.o.ProviderAdminToken,
		StateFile: p.o.ProviderStateFile, Logger: p.log.With("component", "oidc")}); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	p.Go("oidc", p.provider.Run)
	if err := p.startCallout(ctx); err != nil {
		return err
	}
	return p.startOperator(ctx)
}

// startServer makes the secrets and the configuration and starts the
// server.
func (p *Plane) startServer() error {
	if p.secrets == nil {
		var err error
		if p.secrets, err = NewSecrets(); err != nil {
			return err
		}
	}
	if p.o.Plain {
		p.secrets = &Secrets{CalloutPassword: p.secrets.CalloutPassword, ReaderPassword: p.secrets.ReaderPassword,
			SysPassword: p.secrets.SysPassword, PresencePassword: p.secrets.PresencePassword, Issuer: p.secrets.Issuer}
	}
	p.conf = p.o.Config
	if len(p.o.Servers) > 0 {
		var err error
		p.conf, err = serverConfig(p.secrets, p.o.StaticUser)
		return err
	}
	if p.conf == "" {
		var err error
		if p.conf, err = serverConfig(p.secrets, p.o.StaticUser); err != nil {
			return err
		}
	}
	if p.o.Plain {
		p.conf = plainConfig(p.conf)
	}
	srv, err := natsembed.Start(natsembed.Options{Config: p.conf, StoreDir: p.o.StoreDir, Host: p.o.Host, Port: p.o.Port,
		ServerName: p.o.ServerName, Sync: p.o.Sync,
		Logger: slog.New(minLevel{p.log.With("component", "nats").Handler(), p.o.NATSLogLevel})})
	if err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	p.server = srv
	return nil
}

// startCallout connects the callout replicas, runs them and waits until
// each has subscribed.
func (p *Plane) startCallout(ctx context.Context) error {
	var err error
	if p.verifier, err = authcallout.NewVerifier(authcallout.VerifierOptions{Issuer: p.provider.Issuer(),
		Audience: p.provider.Audience(), MinRefreshInterval: p.o.MinKeyRefresh, Metrics: p.o.CalloutMetrics}); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	for range p.o.Replicas {
		r, err := authcallout.Connect(authcallout.ReplicaOptions{
			URL: p.URL(), CalloutPassword: p.secrets.CalloutPassword, ReaderPassword: p.secrets.ReaderPassword,
			SystemPassword: p.secrets.SysPassword, Issuer: p.secrets.Issuer, XKey: p.secrets.XKey, Verifier: p.verifier,
			Account: authcallout.AccountFleet, DeviceAccount: authcallout.AccountDevices,
			Logger: p.log.With("component", "authcallout"), Metrics: p.o.CalloutMetrics,
		})
		if err != nil {
			return fmt.Errorf("controlplane: callout replica: %w", err)
		}
		p.replicas = append(p.replicas, r)
		p.Go("authcallout", r.Run)
	}
	timeout := time.NewTimer(startTimeout)
	defer timeout.Stop()
	for _, r := range p.replicas {
		select {
		case <-r.Ready():
		case <-p.ctx.Done():
			return fmt.Errorf("controlplane: the auth callout stopped before it subscribed: %w", p.Err())
		case <-ctx.Done():
			return fmt.Errorf("controlplane: waiting for the auth callout: %w", ctx.Err())
		case <-timeout.C:
			return fmt.Errorf("controlplane: the auth callout did not subscribe within %s", startTimeout)
		}
	}
	return nil
}

// startOperator connects the operator through the callout, makes the
// store on its connection and provisions the streams and buckets.
func (p *Plane) startOperator(ctx context.Context) error {
	var err error
	if p.operator, err = p.ConnectMachine(ctx, operatorName, authcallout.RoleOperator); err != nil {
		return err
	}
	if p.store, err = events.NewStore(p.operator, events.StoreOptions{Logger: p.log}); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := events.Provision(pctx, p.store.JetStream(), p.o.Provision); err != nil {
		return fmt.Errorf("controlplane: provision: %w", err)
	}
	if p.intent, err = p.store.JetStream().KeyValue(pctx, events.BucketIntent); err != nil {
		return fmt.Errorf("controlplane: bucket %s: %w", events.BucketIntent, err)
	}
	if p.identity, err = p.store.JetStream().KeyValue(pctx, events.BucketIdentity); err != nil {
		return fmt.Errorf("controlplane: bucket %s: %w", events.BucketIdentity, err)
	}
	return nil
}

// Go runs a long-running part in the plane's group: fn gets a context that
// ends when Close is called or another part fails. An error fn returns
// before that (wrapped with name) stops the plane: Done is closed and Err
// returns it. After Close, Go does nothing.
func (p *Plane) Go(name string, fn func(context.Context) error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.group.Go(func() error {
		if err := fn(p.ctx); err != nil && p.ctx.Err() == nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	})
}

// Context is the one every part gets: it ends when the plane stops
// (Done). Callers bound their own work by it.
func (p *Plane) Context() context.Context { return p.ctx }

// Done is closed when the plane stops: a part failed (Err says which) or
// Close was called.
func (p *Plane) Done() <-chan struct{} { return p.ctx.Done() }

// Err is the first failure of a part; nil while every part runs and after
// a Close that came first.
func (p *Plane) Err() error {
	if p.ctx.Err() == nil {
		return nil
	}
	if cause := context.Cause(p.ctx); !errors.Is(cause, errClosed) {
		return cause
	}
	return nil
}

// Close stops the long-running parts and joins their goroutines, closes
// every connection the plane made and shuts the server down. It returns
// the first failure of a part, if any; later calls do nothing and return
// nil, so a failure is reported once.
func (p *Plane) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel(errClosed)
	err := p.group.Wait()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for i := len(conns) - 1; i >= 0; i-- {
		conns[i].Close()
	}
	for _, r := range p.replicas {
		r.Close()
	}
	if p.server != nil {
		p.server.Shutdown()
	}
	return err
}

package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nationtech/harmony-fleet/dashboard"
	"github.com/nationtech/harmony-fleet/dashboard/fleetview"
	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/metrics"
)

// serveWeb is `fleet-operator serve-web [--mock]`: the operator's web
// dashboard (package dashboard). See docs/dashboard.md.
func serveWeb(ctx context.Context, args []string, logOut io.Writer) error {
	fs := flag.NewFlagSet("fleet-operator serve-web", flag.ContinueOnError)
	listen := fs.String("listen", envOr("FLEET_DASHBOARD_LISTEN", ":8080"), "address to serve on ($FLEET_DASHBOARD_LISTEN)")
	public := fs.String("public-url", os.Getenv("FLEET_DASHBOARD_URL"), "URL users reach the dashboard at, e.g. https://fleet.example.com ($FLEET_DASHBOARD_URL; with --mock default http://127.0.0.1:<port>)")
	issuer := fs.String("oidc-issuer", os.Getenv("FLEET_OIDC_ISSUER"), "issuer URL of the OpenID Provider (Zitadel) users sign in with ($FLEET_OIDC_ISSUER)")
	// The dashboard's own NATS identity: a machine key at the same
	// provider (role fleet-operator), like the operator's.
	natsKey := natsKeyFlags(fs, issuer)
	clientID := fs.String("oidc-client-id", os.Getenv("FLEET_OIDC_CLIENT_ID"), "client id of the dashboard's web application ($FLEET_OIDC_CLIENT_ID)")
	secretFile := fs.String("oidc-client-secret-file", os.Getenv("FLEET_OIDC_CLIENT_SECRET_FILE"), "file holding the web application's client secret ($FLEET_OIDC_CLIENT_SECRET_FILE; empty: a public client, PKCE only)")
	keyFile := fs.String("session-key-file", os.Getenv("FLEET_DASHBOARD_SESSION_KEY_FILE"), "file holding 32 random bytes that seal the session cookies ($FLEET_DASHBOARD_SESSION_KEY_FILE; with --mock default: random per start)")
	lifetime := fs.Duration("session-lifetime", dashboard.DefaultSessionLifetime, "how long a session lasts after sign-in")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then in-cluster)")
	natsURL := fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server URL ($NATS_URL)")
	natsCreds := fs.String("nats-creds", os.Getenv("NATS_CREDS"), "NATS credentials file of the operator identity ($NATS_CREDS)")
	namespace := fs.String("namespace", "", "show only the Deployments and TaskRuns of this namespace (default: all)")
	mock := fs.Bool("mock", false, "serve generated data with a labelled mock sign-in: no Kubernetes, NATS or identity provider needed (every page says so)")
	mockDevices := fs.Int("mock-devices", 240, "how many devices --mock generates")
	mockSeed := fs.Int64("mock-seed", 1, "seed of --mock's generated data")
	kubeUserClaim := fs.String("kube-username-claim", dashboard.DefaultUsernameClaim, "id_token claim naming the Kubernetes user the dashboard impersonates, as the API server's --oidc-username-claim")
	kubeUserPrefix := fs.String("kube-username-prefix", "", "prefix of that user name, as the API server's --oidc-username-prefix (empty: its default, \"<issuer>#\" unless the claim is email; \"-\": none)")
	kubeGroupsPrefix := fs.String("kube-groups-prefix", "", "prefix of the Kubernetes groups impersonated for the fleet-admin and fleet-viewer roles, as the API server's groups prefix")
	neverConnected := fs.Duration("never-connected-after", fleetview.DefaultNeverConnectedAfter, "an enrolled Device that has not sent a heartbeat this long after its creation is an alert (as the FleetDevicesNeverConnected rule)")
	metricsAddr := fs.String("metrics-addr", "0", "address of the Prometheus metrics endpoint, /metrics: the device log streams the dashboard reads (0: off; not with --mock)")
	logFormat := fs.String("log-format", "json", "log format: json or text")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve-web takes no arguments; got %q", fs.Args())
	}
	handler, err := logHandler(*logFormat, logOut)
	if err != nil {
		return err
	}
	logger := slog.New(handler).With("component", "dashboard")

	so := dashboard.Options{Logger: logger, PublicURL: *public, SessionLifetime: *lifetime, Mock: *mock,
		Kube: dashboard.KubeIdentity{UsernameClaim: *kubeUserClaim, UsernamePrefix: *kubeUserPrefix, GroupsPrefix: *kubeGroupsPrefix}}
	switch {
	case *keyFile != "":
		key, err := readSessionKey(*keyFile)
		if err != nil {
			return err
		}
		so.SessionKey = key
	case *mock:
		so.SessionKey = make([]byte, dashboard.SessionKeySize)
		_, _ = rand.Read(so.SessionKey)
	default:
		return errors.New("--session-key-file is required: a file of 32 random bytes (head -c 32 /dev/urandom > session.key), the same for every replica")
	}
	serveMetrics := *metricsAddr != "0" && *metricsAddr != ""
	if *mock && serveMetrics {
		return errors.New("--metrics-addr: --mock reads no device logs and has no metrics: drop one of them")
	}
	if *mock {
		if *issuer != "" {
			return errors.New("--mock signs in mock users: drop --oidc-issuer")
		}
		so.MockSignIn = true
	} else {
		if *issuer == "" || *clientID == "" {
			return errors.New("--oidc-issuer and --oidc-client-id are required (the Zitadel web application of the dashboard); --mock needs neither")
		}
		o := &dashboard.OIDC{Issuer: *issuer, ClientID: *clientID}
		if *secretFile != "" {
			raw, err := os.ReadFile(*secretFile)
			if err != nil {
				return fmt.Errorf("--oidc-client-secret-file: %w", err)
			}
			o.ClientSecret = strings.TrimSpace(string(raw))
			if o.ClientSecret == "" {
				return fmt.Errorf("--oidc-client-secret-file %s is empty", *secretFile)
			}
		}
		so.OIDC = o
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	if so.PublicURL == "" && *mock {
		so.PublicURL = "http://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	}
	if so.PublicURL == "" {
		ln.Close()
		return errors.New("--public-url is required: the URL users reach the dashboard at (https://...)")
	}

	if *mock {
		if *mockDevices < 0 {
			ln.Close()
			return fmt.Errorf("--mock-devices %d: give 0 or more", *mockDevices)
		}
		view := fleetview.Mock(*mockSeed, *mockDevices)
		so.View, so.Actions, so.Acks = view, dashboard.NewMockActions(), dashboard.NewMemoryAcks()
		srv, err := dashboard.New(so)
		if err != nil {
			ln.Close()
			return err
		}
		fmt.Fprintf(logOut, "fleet-operator serve-web --mock: mock data at %s (mock sign-in, nothing real)\n", so.PublicURL)
		g, gctx := errgroup.WithContext(ctx)
		g.Go(func() error { return view.Run(gctx) })
		g.Go(func() error { return srv.Run(gctx, ln) })
		if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}

	keyOpts, err := natsKey.options(ctx, *natsCreds != "", logger)
	if err != nil {
		ln.Close()
		return err
	}
	cfg, err := kubeConfig(*kubeconfig)
	if err != nil {
		ln.Close()
		return err
	}
	nopts := []nats.Option{nats.Name("fleet-dashboard"), nats.MaxReconnects(-1)}
	if *natsCreds != "" {
		nopts = append(nopts, nats.UserCredentials(*natsCreds))
	}
	nopts = append(nopts, keyOpts...)
	nc, err := nats.Connect(*natsURL, nopts...)
	if err != nil {
		ln.Close()
		return fmt.Errorf("connect to NATS at %s: %w", *natsURL, err)
	}
	defer nc.Close()
	st, err := events.NewStore(nc, events.StoreOptions{Logger: logger})
	if err != nil {
		ln.Close()
		return err
	}
	fo := dashboard.FleetOptions{Server: so, RESTConfig: cfg, Store: st, Namespace: *namespace, NeverConnectedAfter: *neverConnected}
	if !serveMetrics {
		return dashboard.RunFleet(ctx, fo, ln)
	}
	// The device log streams the dashboard reads (ADR 0025, docs/metrics.md).
	fo.LogsMetrics = devicelogs.NewMetrics()
	reg := metrics.NewRegistry()
	reg.MustRegister(fo.LogsMetrics.Collectors()...)
	msrv, err := metrics.Listen(*metricsAddr, map[string]prometheus.Gatherer{metrics.Path: reg})
	if err != nil {
		ln.Close()
		return fmt.Errorf("--metrics-addr: %w", err)
	}
	logger.Info("serving metrics", "addr", msrv.Addr(), "path", metrics.Path)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return msrv.Run(gctx) })
	g.Go(func() error { return dashboard.RunFleet(gctx, fo, ln) })
	return g.Wait()
}

func kubeConfig(path string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path != "" {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	} else {
		cfg, err = ctrl.GetConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes configuration: %w", err)
	}
	return cfg, nil
}

// readSessionKey reads the session key file: exactly 32 bytes, or 32
// bytes as 64 hex digits or base64 on one line.
func readSessionKey(path string) ([]byte, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--session-key-file: %w", err)
	}
	key, err := dashboard.ParseSessionKey(raw)
	if err != nil {
		return nil, fmt.Errorf("--session-key-file %s: %w", path, err)
	}
	return key, nil
}

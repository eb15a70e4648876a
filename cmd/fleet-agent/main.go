// Command fleet-agent is the device agent: it connects to NATS with the
// device's machine key (id_token through the auth callout), reads its own
// intent and reconciles the container runtime. See docs/agent.md.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/metrics"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
	"github.com/nationtech/harmony-fleet/updater"
)

// version is stamped at build time (-ldflags -X main.version=…).
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-agent:", err)
		os.Exit(1)
	}
}

type labelFlag map[string]string

func (l labelFlag) String() string { return fmt.Sprint(map[string]string(l)) }

func (l labelFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("--label %q: use key=value", v)
	}
	l[k] = val
	return nil
}

func run(ctx context.Context, args []string, logOut io.Writer) error {
	fs := flag.NewFlagSet("fleet-agent", flag.ContinueOnError)
	device := fs.String("device", os.Getenv("FLEET_DEVICE"), "this device's id ($FLEET_DEVICE; default: the key file's)")
	natsURL := fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server URL ($NATS_URL)")
	keyFile := fs.String("key-file", os.Getenv("FLEET_KEY_FILE"), "machine key file (Zitadel key JSON) ($FLEET_KEY_FILE)")
	issuer := fs.String("issuer", os.Getenv("FLEET_ISSUER"), "OpenID Provider issuer URL ($FLEET_ISSUER; default: the key file's)")
	audience := fs.String("audience", os.Getenv("FLEET_AUDIENCE"), "id_token audience (project) to request (default: the key file's)")
	noAuth := fs.Bool("insecure-no-auth", false, "connect without a machine key (development servers without the auth callout only)")
	rt := fs.String("runtime", "podman", "container runtime: podman or sim (simulated, for scale tests and fleet dev)")
	socket := fs.String("podman-socket", "unix:///run/podman/podman.sock", "Podman API socket URL")
	heartbeat := fs.Duration("heartbeat", agent.DefaultHeartbeatInterval, "interval of the heartbeats sent besides the one on every connect (0: on connect only; a connected device is Online whatever it is)")
	baoURL := fs.String("openbao-url", os.Getenv("FLEET_OPENBAO_URL"), "OpenBao address for secret_env values and pull credentials ($FLEET_OPENBAO_URL; empty: none)")
	baoRole := fs.String("openbao-role", os.Getenv("FLEET_OPENBAO_ROLE"), "OpenBao JWT auth role the device logs in with: its group's, fleet-group-<namespace>-<group>, or fleet-device-<namespace> ($FLEET_OPENBAO_ROLE)")
	baoJWT := fs.String("openbao-jwt-mount", openbao.DefaultJWTMount, "path of OpenBao's JWT auth method")
	baoKV := fs.String("openbao-kv-mount", openbao.DefaultKVMount, "path of OpenBao's KV version 2 engine")
	baoPrefix := fs.String("openbao-device-prefix", os.Getenv("FLEET_OPENBAO_DEVICE_PREFIX"), "KV path under which <prefix>/registry/device-pull/<reference> pull secrets live ($FLEET_OPENBAO_DEVICE_PREFIX)")
	baoCA := fs.String("openbao-ca-file", os.Getenv("FLEET_OPENBAO_CA_FILE"), "PEM file of the CA that signs OpenBao's TLS certificate (default: the system's)")
	initTimeout := fs.Duration("init-timeout", agent.DefaultInitTimeout, "how long an init container may run before the agent stops it and reports the Deployment failed")
	storeMargin := fs.String("image-store-margin", "512MiB", "space the disk preflight keeps free in the image store after a revision's pulls: bytes, or with KiB, MiB, GiB (a revision whose missing layers, unpacked, do not fit with it is refused before any pull)")
	fetchConcurrency := fs.Int("fetch-concurrency", agent.DefaultFetchConcurrency, fmt.Sprintf("images the agent pulls at once when it fetches a revision ahead of its release (spec.rollout.prefetch): 1 to %d", agent.MaxFetchConcurrency))
	keepRevisions := fs.Int("keep-revisions", agent.DefaultKeepRevisions, "revisions of each Deployment whose images are kept after a switch, the current one included (0: never remove images)")
	metricsAddr := fs.String("metrics-addr", "0", "host:port to serve Prometheus metrics on at /metrics, e.g. 127.0.0.1:9464 (0: off)")
	updaterSocket := fs.String("updater-socket", os.Getenv("FLEET_UPDATER_SOCKET"), "the root updater's socket, e.g. /run/fleet-updater/updater.sock ($FLEET_UPDATER_SOCKET; empty: tasks fail with \"no updater configured\")")
	stateDir := fs.String("state-dir", stateDirFromEnv(os.Getenv("STATE_DIRECTORY")), "folder for the agent's state file (health.json: which Deployments are Degraded, a cache) ($STATE_DIRECTORY, systemd's StateDirectory=; empty: none, an agent restart then decides from the engine)")
	degradedRestarts := fs.Int("degraded-restarts", agent.DefaultDegradedRestarts, "deaths of a service within --degraded-window that make its Deployment Degraded (CrashLoop)")
	degradedWindow := fs.Duration("degraded-window", agent.DefaultDegradedWindow, "window the deaths of a service are counted in, and the first recovery window")
	watchPoll := fs.Duration("watch-poll", agent.DefaultWatchPoll, "how often the agent lists its containers while the engine's events flow (every 10s without them)")
	reportContainers := fs.Bool("report-containers", true, "send the device's container state (device.containers telemetry) on change, at most once a minute")
	showVersion := fs.Bool("version", false, "print the version and exit")
	labels := labelFlag{}
	fs.Var(labels, "label", "self-reported placement label key=value (repeatable)")
	hostPathRoots := hostPathRootFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *heartbeat < 0 {
		return fmt.Errorf("--heartbeat is %s: use a positive interval, or 0 for a heartbeat on connect only (default %s)", *heartbeat, agent.DefaultHeartbeatInterval)
	}
	if *showVersion {
		fmt.Fprintln(os.Stdout, version)
		return nil
	}
	if *fetchConcurrency < 1 || *fetchConcurrency > agent.MaxFetchConcurrency {
		return fmt.Errorf("--fetch-concurrency %d: give 1 to %d (images pulled at once when fetching ahead of a release; %d by default)",
			*fetchConcurrency, agent.MaxFetchConcurrency, agent.DefaultFetchConcurrency)
	}
	logger := slog.New(slog.NewJSONHandler(logOut, nil))

	var key *credential.KeyFile
	if *keyFile != "" {
		k, err := credential.ReadKeyFile(*keyFile)
		if err != nil {
			return err
		}
		key = &k
		*issuer = cmp.Or(*issuer, k.Issuer)
		*audience = cmp.Or(*audience, k.Audience)
		*device = cmp.Or(*device, k.Device)
	}
	if *device == "" {
		return errors.New("--device is empty and no key file names one: give this device's id")
	}
	if *baoURL != "" && *baoPrefix == "" {
		return errors.New("--openbao-device-prefix is empty: give the KV path of this device's pull secrets (fleet/<namespace> by default on the operator)")
	}
	if *baoURL != "" && *baoRole == "" {
		return errors.New("--openbao-role is empty: give the OpenBao JWT role of this device's group (fleet-group-<namespace>-<group>, or fleet-device-<namespace>)")
	}
	if key != nil && *issuer == "" {
		return errors.New("--issuer is empty and the key file names no issuer: give the OpenID Provider's issuer URL")
	}
	if *baoURL != "" && key == nil {
		return errors.New("--openbao-url needs --key-file: the device logs in to OpenBao with its id_token")
	}
	if key == nil && !*noAuth {
		return errors.New("no --key-file: a device authenticates with its machine key (or pass --insecure-no-auth for a development server)")
	}

	var r runtime.Runtime
	var ensure func(string) error
	var portInUse func(string, uint16) (bool, error)
	switch *rt {
	case "sim":
		r = sim.New(sim.Options{})
	case "podman":
		var err error
		if r, err = podmanRuntime(ctx, *socket); err != nil {
			return err
		}
		ensure = hostPathRoots.ensure
		portInUse = agent.HostPortInUse
	default:
		return fmt.Errorf("--runtime %q: use podman or sim", *rt)
	}

	var nc *nats.Conn
	var idToken func(context.Context) (string, error)
	if key != nil {
		dc, err := agent.Connect(ctx, agent.ConnectOptions{URL: *natsURL, Key: key, Device: *device, Issuer: *issuer, Audience: *audience, Logger: logger})
		if err != nil {
			return err
		}
		nc, idToken = dc.Conn, dc.Source.IDToken
	} else {
		// --insecure-no-auth: a development server without the callout.
		var err error
		if nc, err = nats.Connect(*natsURL, nats.Name("fleet-agent "+*device), nats.MaxReconnects(-1), nats.CustomInboxPrefix(credential.InboxPrefix(*device)),
			nats.RetryOnFailedConnect(true), nats.CustomReconnectDelay(agent.ReconnectDelay)); err != nil {
			return fmt.Errorf("connect to NATS at %s: %w", *natsURL, err)
		}
	}
	defer nc.Close()

	if *initTimeout <= 0 {
		return fmt.Errorf("--init-timeout %s: give a positive duration, e.g. 10m", *initTimeout)
	}
	margin, err := agent.ParseSize(*storeMargin)
	if err != nil {
		return fmt.Errorf("--image-store-margin: %w", err)
	}
	rec := &agent.Reconciler{Runtime: r, Log: logger, EnsureHostPath: ensure, PortInUse: portInUse, InitTimeout: *initTimeout,
		ImageStoreMargin: cmp.Or(margin, -1)} // 0 given: no margin
	if store, ok := r.(runtime.ImageStore); ok {
		rec.ImageStore = store
	}
	if *keepRevisions < 0 {
		return fmt.Errorf("--keep-revisions %d: give 0 (never remove images) or more", *keepRevisions)
	}
	if pr, ok := r.(runtime.ImagePruner); ok && *keepRevisions > 0 {
		rec.Pruner, rec.KeepRevisions = pr, *keepRevisions
	}
	if *baoURL != "" {
		ds, err := deviceSecrets(openbao.Config{Address: *baoURL, Role: *baoRole, JWTMount: *baoJWT, KVMount: *baoKV}, *baoCA, idToken, *baoPrefix)
		if err != nil {
			return err
		}
		rec.Secrets, rec.Credentials = ds, ds
	}

	// Bound last, once nothing else can fail: the listener is closed only
	// by the server's Run.
	am := agent.NewMetrics(nil)
	var msrv *metrics.Server
	if *metricsAddr != "0" && *metricsAddr != "" {
		reg := metrics.NewRegistry()
		reg.MustRegister(am.Collectors()...)
		var err error
		if msrv, err = metrics.Listen(*metricsAddr, map[string]prometheus.Gatherer{metrics.Path: reg}); err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		logger.Info("serving metrics", "addr", msrv.Addr(), "path", metrics.Path)
	}
	// The agent and the metrics server run side by side; either's failure
	// stops both.
	g, gctx := errgroup.WithContext(ctx)
	if msrv != nil {
		g.Go(func() error { return msrv.Run(gctx) })
	}
	var upd agent.Updater
	if *updaterSocket != "" {
		upd = updater.Client{Socket: *updaterSocket}
	}
	g.Go(func() error {
		return agent.Run(gctx, agent.Options{
			Device: *device, Conn: nc, Labels: labels, AgentVersion: version, HeartbeatInterval: heartbeatOption(*heartbeat), Logger: logger,
			Reconciler: rec, Metrics: am, Updater: upd, StateDir: *stateDir, DegradedRestarts: *degradedRestarts,
			DegradedWindow: *degradedWindow, WatchPoll: *watchPoll, NoContainerReports: !*reportContainers,
			FetchConcurrency: *fetchConcurrency,
		})
	})
	return g.Wait()
}

// deviceSecrets builds the OpenBao secret source; caFile (optional) is the
// CA of OpenBao's TLS certificate.
func deviceSecrets(cfg openbao.Config, caFile string, idToken func(context.Context) (string, error), prefix string) (*openbao.DeviceSecrets, error) {
	if caFile != "" {
		hc, err := openbao.HTTPClientWithCA(caFile)
		if err != nil {
			return nil, fmt.Errorf("--openbao-ca-file: %w", err)
		}
		cfg.HTTPClient = hc
	}
	c, err := openbao.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--openbao-url: %w", err)
	}
	ds, err := openbao.NewDeviceSecrets(c, idToken, prefix)
	if err != nil {
		return nil, fmt.Errorf("--openbao-device-prefix: %w", err)
	}
	return ds, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// heartbeatOption is agent.Options.HeartbeatInterval for --heartbeat: 0
// (on connect only) is a negative interval there.
func heartbeatOption(flag time.Duration) time.Duration {
	if flag == 0 {
		return -1
	}
	return flag
}

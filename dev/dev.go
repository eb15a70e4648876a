// Package dev runs the whole Fleet control plane on one machine for
// `fleet dev`: the embedded NATS JetStream server with the documented auth
// callout configuration (accounts AUTH, FLEET, DEVICES, SYS) and the Fleet
// streams and KV buckets, the development OpenID Provider, the OpenBao
// stand-in (dev/baostandin, configured through secrets/openbao as for
// OpenBao), the auth callout service, etcd + kube-apiserver with the Fleet
// CRDs, the operator (connected through the callout with the fleet-operator
// role), the web dashboard (package dashboard, on loopback, with a
// development login printed), and the devices: N simulated ones and, when a
// Podman API socket answers, one (PodmanDevice) on real Podman, with the
// example images built locally. Each device is enrolled through package enroll, connects with
// its machine key through the callout exactly like a real device, and reads
// its secrets from the stand-in with its id_token.
//
// It owns the wiring and the lifecycle of the parts it starts; the parts
// themselves live in their own packages, and the control plane proper
// (NATS, the provider, the callout, the operator's connection, the streams
// and buckets) is assembled by controlplane, whose run group also
// runs the stand-in, the operator and the devices. State under the data
// folder (the JetStream store, etcd's data, the NATS secrets, the device key
// files, the development provider's machine users and their public keys)
// survives a restart, so a device attached with `fleet enroll --dev` keeps
// working across it; the provider's signing key, its human users and the
// OpenBao stand-in are made again (the stand-in seeded again) on every run. The bin folder under it
// (links to fleet, kubectl and the nats CLI, which the printed PATH line
// makes a new shell find) is remade on every start.
//
// NATS, the provider and the stand-in listen on Options.Listen (loopback
// by default) and every URL fleet dev prints or writes names
// Options.Advertise; with them on the network a real device attaches:
// `fleet enroll --dev` enrolls it with what fleet dev writes to
// <data>/endpoints.json (ReadEndpoints), and its fleet-agent connects like
// the in-process devices do.
//
// When the registry `task setup:podman` runs answers, fleet dev also gives
// the reference harmony program's "dev" context what CI gives harmony (Ship):
// a CI machine key, the stand-in's JWT role and secrets at the paths harmony
// reads, and a kubeconfig limited to the namespace's Deployments; it prints
// the lines that build the program and run `harmony ship` against it.
//
// Only cmd/fleet imports it (internal/hygiene checks); tests may.
package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/controlplane"
	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/enroll"
	"github.com/nationtech/harmony-fleet/internal/gitwork"
	"github.com/nationtech/harmony-fleet/metrics"
	"github.com/nationtech/harmony-fleet/operator"
)

// Options configure `fleet dev`.
type Options struct {
	// DataDir holds everything that must survive a restart: the JetStream
	// store, etcd's data, the NATS secrets, the kubeconfig and the device
	// key files. The next run on the same folder resumes the same state.
	DataDir string
	// NATSPort is the client port of the embedded server. Default 4222;
	// -1 picks a free port.
	NATSPort int
	// Listen is the IP address NATS, the development OpenID Provider and
	// the OpenBao stand-in listen on. Default DefaultListen (loopback
	// only); 0.0.0.0 (or ::) listens on every interface, so that a real
	// device on the network can attach (development only: nothing of it
	// uses TLS). kube-apiserver and the metrics stay where they are.
	Listen string
	// Advertise is the host name or address a device reaches this
	// machine at, put into every URL fleet dev prints and writes (the
	// provider's issuer, which the callout checks id_tokens against,
	// above all). Default: Listen, or this machine's first non-loopback
	// address when Listen is 0.0.0.0 or ::.
	Advertise string
	// Devices is how many simulated devices run (0: none).
	Devices int
	// Runtime is RuntimeAuto (default), RuntimePodman or RuntimeSim. With
	// Podman, one more device, PodmanDevice, drives the engine.
	Runtime string
	// PodmanSocket is the Podman API socket (a path or unix:// URI).
	// Default: $XDG_RUNTIME_DIR/podman/podman.sock, then
	// <repository>/.cache/run/podman.sock, the first that answers.
	PodmanSocket string
	// Namespace holds the Device resources and is the namespace of the
	// printed examples. Default "lab".
	Namespace string
	// KubeBinDir holds kube-apiserver, etcd and kubectl. Default
	// <repository>/.cache/k8s-<KubernetesVersion> (DefaultKubeBinDir).
	KubeBinDir string
	// CRDDir holds the Fleet CRDs. Default <repository>/k8s/config/crd.
	CRDDir string
	// AdmissionDir holds the admission policies shipped with the CRDs
	// (who may pause, resume and approve a rollout). Default
	// <repository>/k8s/config/admission.
	AdmissionDir string
	// NATSCLI is the nats CLI that <data>/bin/nats links to (the printed
	// next steps call it). Default: $FLEET_NATS_CLI, else
	// <repository>/.cache/tools/natscli-v0.5.0/nats when it exists, else
	// nats on PATH. When none is found, fleet dev still runs and its
	// printed text says how to build it (SetupNATSCLICommand).
	NATSCLI string
	// MetricsAddr is where fleet dev serves Prometheus metrics (host:port;
	// port 0 picks a free one): the operator's on /metrics/operator, the
	// auth callout's on /metrics/authcallout and every device agent's (with
	// a device label) on /metrics/agents. Default DefaultMetricsAddr.
	MetricsAddr string
	// Logger receives the components' logs.
	Logger *slog.Logger
	// Out receives the usage instructions printed once everything is up.
	Out io.Writer
	// Ready, if set, is called once everything is up.
	Ready func(Info)
}

// Info is what a running fleet dev offers (no secret: the passwords are in
// files).
type Info struct {
	// NATSURL is the embedded server's client URL, with the advertised
	// host.
	NATSURL string
	// Listen is the address NATS, the provider and the OpenBao stand-in
	// listen on; Advertise the host their URLs name.
	Listen, Advertise string
	// EndpointsFile is <data>/endpoints.json, which `fleet enroll --dev`
	// reads (Endpoints).
	EndpointsFile string
	// AdminUser is a static FLEET user for the nats CLI (whole account).
	AdminUser string
	// AdminPasswordFile holds its password.
	AdminPasswordFile string
	// Kubeconfig is the admin kubeconfig file (in the data folder).
	Kubeconfig string
	// Kubectl is the kubectl binary matching the API server.
	Kubectl string
	// BinDir is <data>/bin (absolute): links named fleet, kubectl and nats
	// to the binaries the printed next steps call, remade on every start.
	// The printed `export PATH=...` line puts it first on PATH.
	BinDir string
	// NATSCLI is the nats CLI that BinDir/nats links to; "" when none was
	// found, and then NATSCLIMissing says where fleet dev looked.
	NATSCLI, NATSCLIMissing string
	// Issuer is the development OpenID Provider's issuer URL (advertised
	// host).
	Issuer string
	// Namespace holds the Device resources.
	Namespace string
	// Devices are the ids of every device (the Podman device first).
	Devices []string
	// Runtime is what the devices run on: RuntimePodman (PodmanDevice on
	// the engine, the others simulated) or RuntimeSim.
	Runtime string
	// PodmanDevice is the id of the device on the engine with Podman:
	// PodmanDevice, or podman-2, … when another fleet dev on this machine
	// drives the same engine.
	PodmanDevice string
	// PodmanSocket is the engine's socket URI with Podman; RuntimeNote
	// says why Podman is not used otherwise.
	PodmanSocket, RuntimeNote string
	// HostFolderNotes name the ExampleHostFolders a rootless engine's
	// containers could not write, each with the fix (printed under the
	// runtime line).
	HostFolderNotes []string
	// OpenBaoAddr is the OpenBao stand-in's address (advertised host).
	OpenBaoAddr string
	// OpenBaoTokenFile holds its root token (mode 0600).
	OpenBaoTokenFile string
	// MetricsURL is the base of the metrics endpoints: MetricsURL +
	// "/operator", "/authcallout" and "/agents".
	MetricsURL string
	// DashboardURL is the web dashboard's URL (loopback only);
	// DashboardUser signs in to it with the password in
	// DashboardPasswordFile (new every run; fleet dev also prints it).
	DashboardURL, DashboardUser, DashboardPasswordFile string
	// DashboardViewer is a user without the fleet-admin role, which the
	// dashboard refuses; its password is in DashboardViewerPasswordFile.
	DashboardViewer, DashboardViewerPasswordFile string
	// StartupTime is how long the start took.
	StartupTime time.Duration
	// Ship is what `harmony ship` of the reference program needs
	// (docs/fleet.md, "Ship from a laptop as CI would").
	Ship Ship
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.DataDir == "" {
		errs = append(errs, errors.New("fleet dev: data folder is empty: pass --data-dir"))
	}
	if o.NATSPort < -1 || o.NATSPort > 65535 {
		errs = append(errs, fmt.Errorf("fleet dev: --nats-port %d: use 1..65535 (or -1 for any free port)", o.NATSPort))
	}
	if err := checkHosts(o.Listen, o.Advertise); err != nil {
		errs = append(errs, err)
	}
	if o.Devices < 0 || o.Devices > 1000 {
		errs = append(errs, fmt.Errorf("fleet dev: --devices %d: use 0..1000", o.Devices))
	}
	switch o.Runtime {
	case "", RuntimeAuto, RuntimePodman, RuntimeSim:
	default:
		errs = append(errs, fmt.Errorf("fleet dev: --runtime %q: use auto, podman or sim", o.Runtime))
	}
	return errors.Join(errs...)
}

func (o *Options) defaults() error {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.NATSPort == 0 {
		o.NATSPort = 4222
	}
	if o.MetricsAddr == "" {
		o.MetricsAddr = DefaultMetricsAddr
	}
	if o.Namespace == "" {
		o.Namespace = "lab"
	}
	if o.Runtime == "" {
		o.Runtime = RuntimeAuto
	}
	var err error
	if o.Listen, o.Advertise, err = resolveHosts(o.Listen, o.Advertise, interfaces); err != nil {
		return err
	}
	if o.KubeBinDir == "" {
		if o.KubeBinDir, err = DefaultKubeBinDir(); err != nil {
			return fmt.Errorf("%w: pass --kube-bin-dir", err)
		}
	}
	if o.CRDDir == "" {
		if o.CRDDir, err = DefaultCRDDir(); err != nil {
			return fmt.Errorf("%w: pass --crd-dir", err)
		}
	}
	if o.AdmissionDir == "" {
		if o.AdmissionDir, err = DefaultAdmissionDir(); err != nil {
			return fmt.Errorf("%w: pass --admission-dir", err)
		}
	}
	return nil
}

// Run starts the control plane, prints how to use it, and blocks until ctx
// ends or a component fails; then it stops everything (every goroutine
// joined, etcd and kube-apiserver stopped, NATS shut down) and returns.
func Run(ctx context.Context, o Options) (err error) {
	if err := o.Validate(); err != nil {
		return err
	}
	if err := o.defaults(); err != nil {
		return err
	}
	s := &session{o: o, log: o.Logger, began: time.Now()}
	// Fail before starting anything when the kube binaries are missing.
	if err := checkKubeBinaries(o.KubeBinDir); err != nil {
		return err
	}
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return fmt.Errorf("fleet dev: --data-dir: %w", err)
	}
	release, err := claimDataDir(o.DataDir)
	if err != nil {
		return err
	}
	defer release()
	warnIfCommittable(ctx, o.DataDir, o.Logger)
	if err := s.linkBinaries(); err != nil {
		return err
	}
	if err := s.loadSecretsAndRuntime(ctx); err != nil {
		return err
	}
	defer s.eng.close()
	if s.eng != nil {
		name, release, err := claimPodmanDevice(podmanClaimRoot(), o.DataDir, s.eng.uri)
		if err != nil {
			return err
		}
		defer release()
		s.podmanName = name
		if name != PodmanDevice {
			s.log.Warn("another fleet dev drives the same Podman engine with its own Podman device: this run's is "+name,
				"socket", s.eng.uri, "device", name)
		}
	}
	if err := s.startControlPlane(ctx); err != nil {
		return err
	}
	defer func() {
		if cerr := s.plane.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	// What follows ends when a part of the plane fails, too.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.plane.Context(), cancel)()
	if err := s.startOpenBao(ctx); err != nil {
		return err
	}
	if err := s.startKubeAPI(); err != nil {
		return err
	}
	defer func() {
		// After the plane: the operator must have stopped first.
		if cerr := s.plane.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		if serr := s.k.stop(); serr != nil {
			err = errors.Join(err, serr)
		}
	}()
	if err := s.connectKube(ctx); err != nil {
		return err
	}
	if err := s.setupShip(ctx); err != nil {
		return err
	}
	s.startOperator()
	if err := s.startDevices(ctx); err != nil {
		return err
	}
	if err := s.serveMetrics(); err != nil {
		return err
	}
	if s.dashURL, s.dashPassword, err = s.startDashboard(ctx); err != nil {
		return err
	}
	if _, err := s.announce(); err != nil {
		return err
	}
	<-ctx.Done()
	s.log.Info("fleet dev stopping")
	return nil
}

// warnIfCommittable warns when the data folder, which holds secrets and
// device keys, is in a git work tree that does not ignore it (a `git add`
// would commit them).
func warnIfCommittable(ctx context.Context, dataDir string, log *slog.Logger) {
	root, err := gitwork.Unignored(ctx, filepath.Join(dataDir, "secrets", "x"))
	if root == "" {
		return
	}
	attrs := []any{"dataDir", dataDir, "worktree", root}
	if err != nil {
		attrs = append(attrs, "gitError", err)
	}
	log.Warn("the data folder is inside a git work tree that does not ignore it: a git add would commit its secrets and device keys; add it to .gitignore or pass another --data-dir",
		attrs...)
}

// session is what Run has started so far: each step of Run adds its part,
// and Run alone registers the cleanups, in the order that stops them right.
type session struct {
	o     Options
	log   *slog.Logger
	began time.Time
	bins  binDir
	sec   *secrets
	// eng is the Podman engine (nil: simulated devices only); note says
	// why. podmanName is the id of the device that drives it
	// (claimPodmanDevice).
	eng        *podmanEngine
	note       string
	podmanName string
	plane      *controlplane.Plane
	// natsURL is the NATS URL with the advertised host (the in-process
	// clients use the plane's own).
	natsURL string
	// metrics serves the parts' metrics; callout and agents are the
	// callout's and the devices' (the operator's are controller-runtime's
	// registry).
	metrics *metrics.Server
	callout *authcallout.Metrics
	agents  *prometheus.Registry
	// logs are the dashboard's device log streams (ADR 0025), served
	// with the operator's metrics: the dashboard is fleet-operator
	// serve-web.
	logs *devicelogs.Metrics
	bs   *bao
	k    *kube
	kc   client.Client
	devs []device
	ids  []string
	ship Ship
	// dashURL is the dashboard's URL; dashPassword the run's password of
	// DashboardUser (printed once, never logged).
	dashURL, dashPassword string
}

// linkBinaries makes <data>/bin: fleet, kubectl and the nats CLI for the
// printed steps.
func (s *session) linkBinaries() error {
	o := s.o
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("fleet dev: find its own binary to link as <data>/bin/fleet: %w", err)
	}
	root, _ := repoRoot() // outside the repository: no default nats CLI there
	if s.bins, err = makeBinDir(o.DataDir, self, filepath.Join(o.KubeBinDir, "kubectl"), natsSearch{
		flag: o.NATSCLI, env: os.Getenv(NATSCLIEnv), repoRoot: root, lookPath: exec.LookPath,
	}); err != nil {
		return err
	}
	if s.bins.natsMissing != "" {
		s.log.Warn("no nats CLI to link: step 3 of the printed next steps needs it", "looked", s.bins.natsMissing,
			"build", SetupNATSCLICommand)
	}
	return nil
}

// loadSecretsAndRuntime loads (or makes) the data folder's secrets and
// chooses the devices' runtime; the caller closes s.eng.
func (s *session) loadSecretsAndRuntime(ctx context.Context) error {
	var err error
	if s.sec, err = loadSecrets(filepath.Join(s.o.DataDir, "secrets")); err != nil {
		return err
	}
	s.eng, s.note, err = chooseRuntime(ctx, s.o)
	return err
}

// startControlPlane starts NATS with the documented callout configuration
// (plus the admin user) and the data folder's secrets, the development
// OpenID Provider, the auth callout, the operator's connection (a machine
// user with the fleet-operator role, through the callout like every
// client), the streams and buckets. The caller closes s.plane.
func (s *session) startControlPlane(ctx context.Context) error {
	sec := s.sec
	conf, err := serverConfig(sec)
	if err != nil {
		return err
	}
	if err := checkNATSPort(s.o.Listen, s.o.NATSPort); err != nil {
		return err
	}
	store := filepath.Join(s.o.DataDir, "jetstream")
	if err := os.MkdirAll(store, 0o700); err != nil {
		return fmt.Errorf("fleet dev: data folder: %w", err)
	}
	natsLevel := slog.LevelWarn
	if s.log.Enabled(ctx, slog.LevelDebug) {
		natsLevel = slog.LevelDebug
	}
	s.callout, s.agents, s.logs = authcallout.NewMetrics(), prometheus.NewRegistry(), devicelogs.NewMetrics()
	// The provider on the port of the previous run when it is free: the
	// issuer in an attached device's key file stays right.
	providerPort, _ := previousPorts(s.o.DataDir, s.o.Listen, s.o.Advertise)
	ln, err := listenPreferring(s.o.Listen, providerPort, DefaultProviderPort)
	if err != nil {
		return fmt.Errorf("fleet dev: OpenID Provider: %w", err)
	}
	noteMoved(s.log, "OpenID Provider", ln, providerPort, DefaultProviderPort)
	s.plane, err = controlplane.Start(ctx, controlplane.Options{
		StoreDir: store, Host: s.o.Listen, Port: s.o.NATSPort, ServerName: "fleet-dev", Logger: slog.New(quietPlaintext{s.log.Handler()}), NATSLogLevel: natsLevel, CalloutMetrics: s.callout,
		Config: conf, Secrets: &controlplane.Secrets{CalloutPassword: sec.calloutPassword, ReaderPassword: sec.readerPassword,
			SysPassword: sec.sysPassword, PresencePassword: sec.presencePassword, Issuer: sec.issuer, XKey: sec.xkey},
		ProviderListener: ln, ProviderIssuer: advertisedURL("http", s.o.Advertise, ln), ProviderAdminToken: sec.idpToken,
		ProviderStateFile: sec.providerStateFile(),
	})
	if err != nil {
		return fmt.Errorf("fleet dev: %w (--listen %s)", err, s.o.Listen)
	}
	s.natsURL = "nats://" + net.JoinHostPort(s.o.Advertise, strconv.Itoa(s.plane.Server().NATS().Addr().(*net.TCPAddr).Port))
	return nil
}

// checkNATSPort fails with ErrNATSPortTaken, naming the port and the flag,
// when another process listens on the NATS port: the embedded server
// would otherwise only time out. The port does not move by itself as the
// others do, since attached devices name it.
func checkNATSPort(host string, port int) error {
	if port <= 0 {
		return nil
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%w: port %d on %s is taken by another process (another fleet dev or a nats-server?): stop it, or start fleet dev with --nats-port <a free port> (--nats-port -1: any free port; a device attached to this data folder names the port, so give it that one again)",
				ErrNATSPortTaken, port, host)
		}
		return fmt.Errorf("fleet dev: NATS port %d on --listen %s: %w", port, host, err)
	}
	return ln.Close()
}

// startOpenBao starts the OpenBao stand-in, configured as docs/agent.md
// says for OpenBao, in the plane's run group.
func (s *session) startOpenBao(ctx context.Context) error {
	op := s.plane.Provider()
	_, port := previousPorts(s.o.DataDir, s.o.Listen, s.o.Advertise)
	bs, err := startBao(ctx, s.log, s.sec.dir, s.o.Listen, s.o.Advertise, port, op.Issuer(), op.Audience(), s.o.Namespace)
	if err != nil {
		return err
	}
	s.bs = bs
	s.plane.Go("openbao", bs.run)
	return nil
}

// startKubeAPI starts etcd + kube-apiserver with the CRDs; the caller stops
// s.k.
func (s *session) startKubeAPI() error {
	s.log.Info("starting etcd and kube-apiserver", "bin", s.o.KubeBinDir)
	k, err := startKube(s.o)
	if err != nil {
		return err
	}
	s.k = k
	recordKube(s.o.DataDir)
	return nil
}

// connectKube makes the Kubernetes client and the Fleet namespace.
func (s *session) connectKube(ctx context.Context) error {
	scheme, err := operator.Scheme()
	if err != nil {
		return fmt.Errorf("fleet dev: %w", err)
	}
	if err := addCoreScheme(scheme); err != nil {
		return err
	}
	if s.kc, err = client.New(s.k.cfg, client.Options{Scheme: scheme}); err != nil {
		return fmt.Errorf("fleet dev: kubernetes client: %w", err)
	}
	return ensureNamespace(ctx, s.kc, s.o.Namespace)
}

// startOperator names the devices and starts the operator, with every
// device in the development group, in the plane's run group.
func (s *session) startOperator() {
	o, log, st, bs := s.o, s.log, s.plane.Store(), s.bs
	s.devs = devices(o.Devices, s.podmanName)
	s.ids = make([]string, len(s.devs))
	for i, d := range s.devs {
		s.ids[i] = d.name
	}
	// Every device of the namespace is in the development group, those
	// attached with `fleet enroll --dev` too.
	groups := devGroups{namespace: o.Namespace}
	plane, k := s.plane, s.k
	plane.Go("operator", func(ctx context.Context) error {
		// A connected device is Online (ADR 0032): the operator follows
		// the servers' view of the device connections.
		presence, err := plane.ConnectPresence()
		if err != nil {
			return err
		}
		return operator.Run(ctx, operator.Options{
			RESTConfig: k.cfg, Store: st, Reader: st, IntentKV: plane.Intent(), Devices: st, ExposureIndex: st, Groups: groups, Presence: presence,
			PresenceStaleSilence: authcallout.StaleSilence,
			// The pull-secret policy sync, on the stand-in with its root
			// token: each Deployment's pull secrets are granted to the
			// devices' group role (OpenBaoRole).
			OpenBao: bs.admin, OpenBaoNames: operator.PolicyNames{DevicePrefix: devicePrefix("{namespace}")},
			Logger: log.With("component", "operator"),
			// Run may be called again in the same process (a restart in a
			// test); metrics are off, so the controllers share nothing.
			SeveralPerProcess: true,
		})
	})
}

// startDevices enrolls the devices like `fleet enroll` and runs each,
// connected like fleet-agent, in the plane's run group.
func (s *session) startDevices(ctx context.Context) error {
	o, plane, bs, eng := s.o, s.plane, s.bs, s.eng
	url, op := plane.URL(), plane.Provider()
	en, err := enroll.New(enroll.Options{Client: s.kc, Provider: op, Namespace: o.Namespace, Logger: s.log.With("component", "enroll")})
	if err != nil {
		return fmt.Errorf("fleet dev: %w", err)
	}
	keyDir := filepath.Join(o.DataDir, "devices")
	if err := os.MkdirAll(keyDir, 0o700); err != nil {
		return fmt.Errorf("fleet dev: device key folder: %w", err)
	}
	for _, d := range s.devs {
		res, err := enrollDevice(ctx, en, s.kc, op, o.Namespace, keyDir, d)
		if err != nil {
			return fmt.Errorf("fleet dev: enroll %s: %w", d.name, err)
		}
		if err := bindDevice(ctx, bs.admin, o.Namespace, res.Subject); err != nil {
			return err
		}
		if err := waitIdentity(ctx, plane.Identity(), res.Subject, res.Device); err != nil {
			return err
		}
		m := agent.NewMetrics(prometheus.Labels{"device": res.Device})
		for _, c := range m.Collectors() {
			if err := s.agents.Register(c); err != nil {
				return fmt.Errorf("fleet dev: metrics of device %s: %w", res.Device, err)
			}
		}
		plane.Go("device "+res.Device, func(ctx context.Context) error {
			return runDevice(ctx, o, url, op.Issuer(), op.Audience(), d, res.KeyFile, bs, eng, m)
		})
	}
	return nil
}

// announce writes <data>/endpoints.json, prints how to use the running
// plane and calls Options.Ready.
func (s *session) announce() (Info, error) {
	o, op := s.o, s.plane.Provider()
	info := Info{
		NATSURL: s.natsURL, Listen: o.Listen, Advertise: o.Advertise, EndpointsFile: filepath.Join(o.DataDir, EndpointsFile),
		AdminUser: devAdminUser, AdminPasswordFile: s.sec.adminPasswordFile(),
		Kubeconfig: s.k.kubeconfig, Kubectl: s.k.kubectl, Issuer: op.Issuer(), Namespace: o.Namespace,
		Devices: s.ids, Runtime: RuntimeSim, RuntimeNote: s.note, OpenBaoAddr: s.bs.addr, OpenBaoTokenFile: s.bs.tokenFile,
		BinDir: s.bins.path, NATSCLI: s.bins.nats, NATSCLIMissing: s.bins.natsMissing,
		MetricsURL: s.metrics.URL(metricsPath), StartupTime: time.Since(s.began), Ship: s.ship,
		DashboardURL: s.dashURL, DashboardUser: DashboardUser, DashboardPasswordFile: filepath.Join(s.sec.dir, dashboardPasswordFile),
		DashboardViewer: DashboardViewer, DashboardViewerPasswordFile: filepath.Join(s.sec.dir, dashboardViewerPasswordFile),
	}
	if s.eng != nil {
		info.Runtime, info.PodmanSocket, info.PodmanDevice = RuntimePodman, s.eng.uri, s.podmanName
		info.HostFolderNotes = s.eng.folderNotes
	}
	if err := writeEndpoints(o.DataDir, Endpoints{
		PID: os.Getpid(), Listen: o.Listen, Advertise: o.Advertise, NATSURL: info.NATSURL, Issuer: info.Issuer, Audience: op.Audience(),
		IDPTokenFile: s.sec.idpTokenFile(), OpenBaoAddr: info.OpenBaoAddr, OpenBaoRole: OpenBaoRole(o.Namespace),
		OpenBaoDevicePrefix: devicePrefix(o.Namespace), OpenBaoTokenFile: s.bs.tokenFile, Namespace: o.Namespace, Kubeconfig: info.Kubeconfig,
		PodmanSocket: info.PodmanSocket,
	}); err != nil {
		return info, err
	}
	// The log record first: the usage text is the last thing printed
	// (`fleet dev env` prints its export lines again).
	s.log.Info("fleet dev running", "nats", info.NATSURL, "listen", info.Listen, "kubeconfig", info.Kubeconfig, "devices", len(info.Devices), "runtime", info.Runtime,
		"startup", info.StartupTime.Round(time.Millisecond))
	printUsage(o.Out, o.DataDir, info, s.dashPassword)
	if o.Ready != nil {
		o.Ready(info)
	}
	return info, nil
}

// NATSCLIEnv names the environment variable holding the nats CLI's path:
// the default of Options.NATSCLI (task dev and task test set it).
const NATSCLIEnv = "FLEET_NATS_CLI"

// SetupNATSCLICommand builds the nats CLI into
// <repository>/.cache/tools/natscli-v0.5.0/nats (once; cached after).
const SetupNATSCLICommand = "go tool -modfile=tools/go.mod task setup:natscli"

// repoNATSCLI is where SetupNATSCLICommand puts the nats CLI, relative to
// the repository root.
const repoNATSCLI = ".cache/tools/natscli-v0.5.0/nats"

// natsSearch is where fleet dev looks for the nats CLI, in this order: the
// flag, the environment variable, the repository's cache, PATH.
type natsSearch struct {
	flag     string                       // --nats-cli (Options.NATSCLI)
	env      string                       // $FLEET_NATS_CLI
	repoRoot string                       // "" outside the repository
	lookPath func(string) (string, error) // exec.LookPath
}

// find returns the nats CLI's absolute path; when there is none, "" and
// where it looked. A flag or variable that is set is used alone: a wrong
// one is reported rather than silently replaced by another CLI.
func (s natsSearch) find() (path, missing string) {
	look := func(p string) (string, error) {
		found, err := s.lookPath(p)
		if err != nil {
			return "", err
		}
		return filepath.Abs(found)
	}
	explicit := func(setting, p string) (string, string) {
		found, err := look(p)
		if err != nil {
			return "", fmt.Sprintf("%s: %v", setting, err)
		}
		return found, ""
	}
	switch {
	case s.flag != "":
		return explicit("--nats-cli "+s.flag, s.flag)
	case s.env != "":
		return explicit(NATSCLIEnv+"="+s.env, s.env)
	}
	var looked []string
	if s.repoRoot != "" {
		p := filepath.Join(s.repoRoot, repoNATSCLI)
		if found, err := look(p); err == nil {
			return found, ""
		}
		looked = append(looked, "none at "+p)
	}
	if found, err := look("nats"); err == nil {
		return found, ""
	}
	return "", strings.Join(append(looked, "none on PATH"), ", ")
}

// binDir is <data>/bin as makeBinDir left it.
type binDir struct {
	// path is the folder, absolute.
	path string
	// nats is the nats CLI that path/nats links to; "" when none was
	// found, and then natsMissing says where fleet dev looked.
	nats, natsMissing string
}

// makeBinDir makes <dataDir>/bin hold the links fleet → fleet, kubectl →
// kubectl and nats → the nats CLI s finds, replacing whatever an earlier
// run left under those names; when no nats CLI is found, an earlier nats
// link is removed and the result says where it looked. Each link points at
// its target's real file, so a target found through an earlier run's link
// (PATH already holding <data>/bin) never becomes a link to itself.
func makeBinDir(dataDir, fleet, kubectl string, s natsSearch) (binDir, error) {
	dir, err := filepath.Abs(filepath.Join(dataDir, "bin"))
	if err != nil {
		return binDir{}, fmt.Errorf("fleet dev: <data>/bin: %w: pass an absolute --data-dir", err)
	}
	b := binDir{path: dir}
	b.nats, b.natsMissing = s.find()
	links := []struct{ name, target string }{{"fleet", fleet}, {"kubectl", kubectl}, {"nats", b.nats}}
	for i, l := range links {
		if l.target == "" {
			continue
		}
		resolved, err := filepath.EvalSymlinks(l.target)
		if err == nil {
			resolved, err = filepath.Abs(resolved)
		}
		if err != nil {
			return binDir{}, fmt.Errorf("fleet dev: %s, to be linked as %s: %w: check that the binary exists",
				l.target, filepath.Join(dir, l.name), err)
		}
		links[i].target = resolved
	}
	b.nats = links[2].target
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return binDir{}, fmt.Errorf("fleet dev: make %s: %w: check that --data-dir is writable", dir, err)
	}
	for _, l := range links {
		if err := replaceLink(filepath.Join(dir, l.name), l.target); err != nil {
			return binDir{}, err
		}
	}
	return b, nil
}

// replaceLink makes path a symbolic link to target, atomically replacing
// what is there; an empty target removes path.
func replaceLink(path, target string) error {
	if target == "" {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("fleet dev: remove the stale link %s: %w: remove it by hand", path, err)
		}
		return nil
	}
	tmp := path + ".new"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("fleet dev: remove %s: %w: remove it by hand", tmp, err)
	}
	if err := os.Symlink(target, tmp); err != nil {
		return fmt.Errorf("fleet dev: link %s to %s: %w: check that --data-dir is writable", tmp, target, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("fleet dev: replace %s with a link to %s: %w: remove %s by hand", path, target, err, path)
	}
	return nil
}

// printUsage prints how to use the running plane; dashPassword is the
// dashboard user's password of this run, printed for the developer at the
// terminal (never logged).
func printUsage(w io.Writer, dataDir string, in Info, dashPassword string) {
	nsim := len(in.Devices)
	devices := fmt.Sprintf("%d simulated (sim-1 … sim-%d)", nsim, nsim)
	runtime := "simulated (" + in.RuntimeNote + ")"
	if in.Runtime == RuntimePodman {
		nsim--
		devices = fmt.Sprintf("%s on Podman + %d simulated", in.PodmanDevice, nsim)
		runtime = "Podman at " + in.PodmanSocket + " for " + in.PodmanDevice + "; the others simulated"
	}
	if nsim == 0 && in.Runtime != RuntimePodman {
		devices = "none"
	}
	ex := exportLines(in.BinDir, in.Kubeconfig, in.NATSURL, in.AdminUser, in.AdminPasswordFile)
	fmt.Fprintf(w, `fleet dev is running (Ctrl-C stops it; the next run resumes from %s)

  NATS JetStream     %s   (auth callout; Fleet streams and KV buckets provisioned)
  OpenID Provider    %s   (development provider; machine users kept in the data folder)
  OpenBao stand-in   %s   (in memory, re-seeded every run; not OpenBao: see docs/fleet.md)
                     root token in %s
  kube-apiserver     kubeconfig %s
  operator           Deployment, rollout, Device and OpenBao pull-secret policy controllers
  devices            %s in namespace %s, groups "lab" and "example-edge", role=analyzer app=example
                     (canary=true: %s)
  runtime            %s
%s  metrics            %s/{operator,authcallout,agents}   (Prometheus; see docs/metrics.md)
  dashboard          %s   (loopback only; docs/dashboard.md)
                     sign in as %s, password %s   (new every run; also in %s)
                     %s has the read-only fleet-viewer role (sees every page, no action): password in %s
  listening on       %s

%s
Point kubectl at it:
  %s
  # kubectl of the same version: %s

Point the nats CLI and fleet history at it (%s: the whole FLEET account, bypasses the callout):
  %s

Next steps:
  1. kubectl apply -n %s -f examples/analysis-api.yaml
  2. kubectl get fdeploy -n %s -w
  3. nats sub --stream FLEET_ROLLOUT --all -T 'fleet.rollout.deployment.%s.analysis-api'
  4. fleet history deployment %s/analysis-api

%s
%s
Print these export lines again (in any shell): fleet dev env --data-dir %s
Start afresh: stop fleet dev, remove %s, start it again (attached devices must then be enrolled again).
See docs/fleet.md and docs/debugging-with-nats.md for more.
`, dataDir, in.NATSURL, in.Issuer, in.OpenBaoAddr, in.OpenBaoTokenFile, in.Kubeconfig, devices, in.Namespace,
		canaries(in.Devices, in.PodmanDevice), runtime, folderNotes(in.HostFolderNotes), in.MetricsURL, in.DashboardURL, in.DashboardUser, dashPassword, in.DashboardPasswordFile,
		in.DashboardViewer, in.DashboardViewerPasswordFile, listening(in),
		pathSection(in), ex.kube, in.Kubectl,
		in.AdminUser, ex.nats,
		in.Namespace, in.Namespace, in.Namespace, in.Namespace, attachSection(dataDir, in), shipSection(in), dataDir, dataDir)
}

// folderNotes are the printed lines of notes, each indented under the
// runtime line.
func folderNotes(notes []string) string {
	var b strings.Builder
	for _, n := range notes {
		fmt.Fprintf(&b, "                     %s\n", n)
	}
	return b.String()
}

// exports are the shell lines that point a new shell at a running fleet
// dev: its bin folder first on PATH, kubectl's kubeconfig, the nats CLI's
// user (its password read from its file, never printed).
type exports struct{ path, kube, nats string }

func exportLines(binDir, kubeconfig, natsURL, adminUser, adminPasswordFile string) exports {
	return exports{
		path: fmt.Sprintf(`export PATH="%s:$PATH"`, binDir),
		kube: "export KUBECONFIG=" + kubeconfig,
		nats: fmt.Sprintf(`export NATS_URL=%s NATS_USER=%s NATS_PASSWORD="$(cat %s)"`, natsURL, adminUser, adminPasswordFile),
	}
}

// Env returns the export lines the fleet dev running on dataDir printed
// (`fleet dev env`), one a line: PATH, KUBECONFIG, the nats CLI's.
// ErrNotRunning when none runs there.
func Env(dataDir string) (string, error) {
	ep, err := ReadEndpoints(dataDir)
	if err != nil {
		return "", err
	}
	bin, err := filepath.Abs(filepath.Join(dataDir, "bin"))
	if err != nil {
		return "", fmt.Errorf("fleet dev env: %w: pass an absolute --data-dir", err)
	}
	ex := exportLines(bin, ep.Kubeconfig, ep.NATSURL, devAdminUser, (&secrets{dir: filepath.Join(dataDir, "secrets")}).adminPasswordFile())
	return ex.path + "\n" + ex.kube + "\n" + ex.nats + "\n", nil
}

// listening is the printed line saying where NATS, the provider and the
// stand-in listen, and what that exposes.
func listening(in Info) string {
	if isLoopback(in.Listen) {
		return in.Listen + " only (NATS, OpenID Provider, OpenBao stand-in; --listen 0.0.0.0 lets a real device attach)"
	}
	return fmt.Sprintf("%s (NATS, OpenID Provider, OpenBao stand-in; URLs name %s): reachable from the network, no TLS, development only (docs/fleet.md)",
		in.Listen, in.Advertise)
}

// attachSection is the printed paragraph on attaching a real device.
func attachSection(dataDir string, in Info) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Attach a real device (docs/fleet.md, \"Attach a real device\"")
	if isLoopback(in.Listen) {
		b.WriteString("; it must reach this machine: start fleet dev with --listen 0.0.0.0")
	}
	fmt.Fprintf(&b, "):\n  fleet enroll --dev --data-dir %s --label board=rpi pi-1\n", dataDir)
	fmt.Fprintf(&b, "  # writes the device's key file %s (mode 0600), prints the fleet-agent command line and the systemd settings\n",
		filepath.Join(dataDir, "devices", "pi-1.key.json"))
	return b.String()
}

// pathSection is the printed paragraph with the PATH export line, which
// makes the next steps' fleet, kubectl and nats found in a new shell, and
// how to build the nats CLI when none was found.
func pathSection(in Info) string {
	var b strings.Builder
	if in.NATSCLIMissing == "" {
		fmt.Fprintf(&b, "Put fleet, kubectl and the nats CLI on PATH (links in %s, remade every start):\n", in.BinDir)
	} else {
		fmt.Fprintf(&b, "Put fleet and kubectl on PATH (links in %s, remade every start; no nats CLI, see below):\n", in.BinDir)
	}
	fmt.Fprintf(&b, "  %s\n", exportLines(in.BinDir, "", "", "", "").path)
	if in.NATSCLIMissing != "" {
		fmt.Fprintf(&b, "  # no nats CLI found (%s), step 3 needs it: build it in the repository with\n", in.NATSCLIMissing)
		fmt.Fprintf(&b, "  #   %s\n", SetupNATSCLICommand)
		fmt.Fprintf(&b, "  # then start fleet dev again (it resumes) to link it as %s\n", filepath.Join(in.BinDir, "nats"))
	}
	return b.String()
}

// canaries lists the canary devices among ids (podmanDevice, the device
// on Podman, is one).
func canaries(ids []string, podmanDevice string) string {
	var out []string
	for i, id := range ids {
		if id == podmanDevice {
			out = append(out, id)
			continue
		}
		if n, err := strconv.Atoi(strings.TrimPrefix(id, "sim-")); err == nil && deviceLabels(n)["canary"] == "true" {
			out = append(out, ids[i])
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

// DefaultMetricsAddr is where fleet dev serves metrics by default.
const DefaultMetricsAddr = "127.0.0.1:9464"

// metricsPath is the base path of fleet dev's metrics endpoints.
const metricsPath = "/metrics"

// serveMetrics listens on Options.MetricsAddr and serves, in the plane's
// run group, the operator's metrics (controller-runtime's registry, which
// holds the operator's own, and the dashboard's device log streams), the
// callout's and the devices'.
func (s *session) serveMetrics() error {
	callout, dashboard := prometheus.NewRegistry(), prometheus.NewRegistry()
	for _, c := range s.callout.Collectors() {
		if err := callout.Register(c); err != nil {
			return fmt.Errorf("fleet dev: metrics: %w", err)
		}
	}
	for _, c := range s.logs.Collectors() {
		if err := dashboard.Register(c); err != nil {
			return fmt.Errorf("fleet dev: metrics: %w", err)
		}
	}
	srv, err := listenMetrics(s.log, s.o.MetricsAddr, map[string]prometheus.Gatherer{
		metricsPath + "/operator":    prometheus.Gatherers{ctrlmetrics.Registry, dashboard},
		metricsPath + "/authcallout": callout,
		metricsPath + "/agents":      s.agents,
	})
	if err != nil {
		return err
	}
	s.metrics = srv
	s.plane.Go("metrics", srv.Run)
	return nil
}

// listenMetrics listens on addr for the metrics of paths. When addr is
// DefaultMetricsAddr and its port is taken (another fleet dev, say), it
// listens on a free port of the same host instead and logs so; the
// printed metrics line names the port used. A port given with
// --metrics-addr does not move.
func listenMetrics(log *slog.Logger, addr string, paths map[string]prometheus.Gatherer) (*metrics.Server, error) {
	srv, err := metrics.Listen(addr, paths)
	if err != nil && addr == DefaultMetricsAddr && errors.Is(err, syscall.EADDRINUSE) {
		host, port, _ := net.SplitHostPort(addr)
		if srv, err = metrics.Listen(net.JoinHostPort(host, "0"), paths); err == nil {
			log.Warn("the default metrics port "+port+" is taken (another fleet dev?): metrics are served on "+srv.Addr()+" instead",
				"addr", srv.Addr())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("fleet dev: %w (--metrics-addr picks another; port 0 any free one)", err)
	}
	return srv, nil
}

// noteMoved logs, when ln does not listen on the first preferred port
// (0s skipped), that the port was taken and which one what uses instead:
// a second fleet dev on this machine moves aside by itself.
func noteMoved(log *slog.Logger, what string, ln net.Listener, ports ...int) {
	got := ln.Addr().(*net.TCPAddr).Port
	for _, p := range ports {
		if p <= 0 {
			continue
		}
		if p != got {
			log.Warn(fmt.Sprintf("port %d of the %s is taken (another fleet dev?): it listens on port %d instead", p, what, got),
				"addr", ln.Addr().String())
		}
		return
	}
}

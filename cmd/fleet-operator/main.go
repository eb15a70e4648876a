// Command fleet-operator runs the Fleet operator (package operator): the
// Deployment and Device controllers, the rollout runner and, when OpenBao
// administration is configured, the pull-secret policy sync, against a
// Kubernetes API server and a NATS JetStream server. Replicas elect a leader
// with a Lease (--leader-elect, on by default); only the leader runs them.
// `fleet-operator serve-web [--mock]` serves the web dashboard instead
// (package dashboard). See docs/operator.md and docs/dashboard.md.
package main

import (
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
	// The tz database, for the time zones devices report
	// (events.LoadTimeZone): the image is built from scratch.
	_ "time/tzdata"

	"github.com/nats-io/nats.go"
	"k8s.io/client-go/rest"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-operator:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, logOut io.Writer) error {
	if len(args) > 0 && args[0] == "serve-web" {
		return serveWeb(ctx, args[1:], logOut)
	}
	fs := flag.NewFlagSet("fleet-operator", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then in-cluster)")
	natsURL := fs.String("nats-url", envOr("NATS_URL", nats.DefaultURL), "NATS server URL ($NATS_URL)")
	natsCreds := fs.String("nats-creds", os.Getenv("NATS_CREDS"), "NATS credentials file of the operator identity ($NATS_CREDS)")
	natsKey := natsKeyFlags(fs, nil)
	provision := fs.Bool("provision", true, "create or update the Fleet streams and KV buckets on start")
	replicas := fs.Int("replicas", 1, "stream replicas when provisioning (3 on a cluster)")
	groupFile := fs.String("group-file", "", "static device group file (JSON); without one, allowedGroups fails closed")
	statusInterval := fs.Duration("status-interval", 2*time.Second, "least time between two status patches of one Deployment")
	staleAfter := fs.Duration("stale-after", 90*time.Second, "how long a device stays Online after its last heartbeat, or after its last connection went with --presence-password-file")
	presencePassword := fs.String("presence-password-file", os.Getenv("FLEET_PRESENCE_PASSWORD_FILE"), "file holding the password of the system account's fleet-presence user: a device with a connection up is Online, learnt from the servers' connect and disconnect events ($FLEET_PRESENCE_PASSWORD_FILE; empty: liveness from heartbeats only)")
	presenceResync := fs.Duration("presence-resync", 2*time.Minute, "how often the servers' connection lists of the device account are read again (with --presence-password-file)")
	presenceStale := fs.Duration("presence-stale-silence", authcallout.StaleSilence, "how long a device whose last connection a server closed as stale (its PINGs unanswered) had at least been silent: ping_interval × ping_max of the servers' configuration; it counts as gone that long before (with --presence-password-file; 0: at the disconnect)")
	targetTimeout := fs.Duration("target-timeout", operator.DefaultTargetTimeout, "how long a rollout target may go without a result (Converged or Failed) after it was handed the revision before it is removed from the revision's accounting")
	progressDeadline := fs.Duration("progress-deadline", operator.DefaultProgressDeadline, "how long a rollout may make no progress (no transition, no target's first report or first result) before its Progressing condition turns False with reason ProgressDeadlineExceeded, for a Deployment without spec.rollout.progressDeadline; status and an alert only, it decides nothing (0: none)")
	followDebounce := fs.Duration("follow-debounce", operator.DefaultFollowDebounce, "how long a target of a Deployment with spec.rollout.targets Follow must not have matched after a label change before it leaves the Deployment and loses its workload (a quarantine or a deletion leaves at once; matching again within it cancels the departure)")
	metricsAddr := fs.String("metrics-addr", "0", "address of the Prometheus metrics endpoint (0: off)")
	healthAddr := fs.String("health-addr", "0", "address of /healthz and /readyz (0: off)")
	var le operator.LeaderElection
	fs.BoolVar(&le.Enabled, "leader-elect", true, "elect one leader among the replicas with a Lease; only the leader runs the controllers and runners (false: this process leads alone, never run two)")
	fs.StringVar(&le.Namespace, "leader-election-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the Lease "+operator.LeaseName+" ($POD_NAMESPACE; default in a cluster: the service account's namespace)")
	fs.DurationVar(&le.LeaseDuration, "leader-election-lease-duration", operator.DefaultLeaseDuration, "how long followers wait for a leader that stopped renewing (whole seconds, longer than the renew deadline)")
	fs.DurationVar(&le.RenewDeadline, "leader-election-renew-deadline", operator.DefaultRenewDeadline, "how long the leader tries to renew before it stops leading and exits (longer than 1.2 × the retry period)")
	fs.DurationVar(&le.RetryPeriod, "leader-election-retry-period", operator.DefaultRetryPeriod, "how often the leader renews and followers try to acquire")
	deviceWorkers := fs.Int("device-workers", operator.DefaultDeviceWorkers, "how many Devices the Device controller reconciles at once")
	kubeQPS := fs.Float64("kube-api-qps", -1, "client-side limit of the requests per second to the Kubernetes API server (negative: none, the API server's priority and fairness limits the operator)")
	kubeBurst := fs.Int("kube-api-burst", 100, "requests above --kube-api-qps allowed in a burst (with a positive --kube-api-qps)")
	logFormat := fs.String("log-format", "json", "log format: json or text")
	baoURL := fs.String("openbao-url", os.Getenv("FLEET_OPENBAO_URL"), "OpenBao address for the pull-secret policy sync ($FLEET_OPENBAO_URL; empty: sync disabled)")
	baoTokenFile := fs.String("openbao-token-file", os.Getenv("FLEET_OPENBAO_TOKEN_FILE"), "file holding an OpenBao token allowed to write sys/policies/acl/fleet-deploy.* and the group roles ($FLEET_OPENBAO_TOKEN_FILE)")
	baoCA := fs.String("openbao-ca-file", os.Getenv("FLEET_OPENBAO_CA_FILE"), "PEM file of the CA that signs OpenBao's TLS certificate (default: the system's)")
	var ps operator.PolicyNames
	baoJWT := fs.String("openbao-jwt-mount", openbao.DefaultJWTMount, "path of OpenBao's JWT auth method")
	fs.StringVar(&ps.KVMount, "openbao-kv-mount", openbao.DefaultKVMount, "path of OpenBao's KV version 2 engine")
	fs.StringVar(&ps.DevicePrefix, "openbao-device-prefix", operator.DefaultDevicePrefix, "KV path of the device pull secrets; {namespace} is the Deployment's namespace")
	fs.StringVar(&ps.GroupRolePrefix, "openbao-group-role-prefix", operator.DefaultGroupRolePrefix, "JWT role of device group G is <prefix>G")
	fs.StringVar(&ps.DefaultRole, "openbao-device-role", operator.DefaultDeviceRole, "JWT role of Deployments without allowedGroups")
	if err := fs.Parse(args); err != nil {
		return err
	}
	handler, err := logHandler(*logFormat, logOut)
	if err != nil {
		return err
	}
	logger := slog.New(handler)

	if *progressDeadline < 0 {
		return fmt.Errorf("--progress-deadline is %s: use a positive duration, or 0 for none (default %s)", *progressDeadline, operator.DefaultProgressDeadline)
	}
	if *progressDeadline == 0 {
		*progressDeadline = -1 // operator.Options: negative is none, zero the default
	}
	if *followDebounce <= 0 {
		return fmt.Errorf("--follow-debounce is %s: use a positive duration (default %s)", *followDebounce, operator.DefaultFollowDebounce)
	}
	if *deviceWorkers < 1 {
		return fmt.Errorf("--device-workers is %d: use a positive count (default %d)", *deviceWorkers, operator.DefaultDeviceWorkers)
	}
	o := operator.Options{Logger: logger, StatusInterval: *statusInterval, StaleAfter: *staleAfter, TargetTimeout: *targetTimeout, ProgressDeadline: *progressDeadline, FollowDebounce: *followDebounce, MetricsAddr: *metricsAddr, HealthAddr: *healthAddr,
		LeaderElection: le, DeviceWorkers: *deviceWorkers}
	o.RESTConfig, err = limitedKubeConfig(*kubeconfig, *kubeQPS, *kubeBurst)
	if err != nil {
		return err
	}
	o.OpenBaoNames = ps
	switch {
	case *baoURL != "" && *baoTokenFile == "":
		return errors.New("--openbao-url needs --openbao-token-file: the policy sync writes policies with an administrator's token")
	case *baoURL == "" && *baoTokenFile != "":
		return errors.New("--openbao-token-file needs --openbao-url")
	case *baoURL != "":
		admin, err := openbaoAdmin(*baoURL, *baoJWT, ps.KVMount, *baoTokenFile, *baoCA)
		if err != nil {
			return err
		}
		o.OpenBao = admin
	}
	if *groupFile != "" {
		g, err := operator.LoadGroupFile(*groupFile)
		if err != nil {
			return err
		}
		o.Groups = g
		// Read again as it changes: a membership change reaches the
		// Follow Deployments without a restart (ADR 0026).
		gw := &operator.GroupFileWatch{Path: *groupFile, Groups: g, Log: logger}
		go func() { _ = gw.Run(ctx) }()
	}

	if err := le.Validate(); err != nil {
		return fmt.Errorf("--leader-election-*: %w", err)
	}
	if le.Enabled && le.Namespace == "" {
		ns, err := os.ReadFile(serviceAccountNamespace)
		if err != nil || strings.TrimSpace(string(ns)) == "" {
			return errors.New("--leader-elect needs --leader-election-namespace (or $POD_NAMESPACE) outside a cluster: the namespace of the Lease " + operator.LeaseName)
		}
		le.Namespace = strings.TrimSpace(string(ns))
	}
	o.LeaderElection = le

	nopts := []nats.Option{nats.Name("fleet-operator"), nats.MaxReconnects(-1)}
	if *natsCreds != "" {
		nopts = append(nopts, nats.UserCredentials(*natsCreds))
	}
	keyOpts, err := natsKey.options(ctx, *natsCreds != "", logger)
	if err != nil {
		return err
	}
	nopts = append(nopts, keyOpts...)
	nc, err := nats.Connect(*natsURL, nopts...)
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", *natsURL, err)
	}
	defer nc.Close()
	st, err := events.NewStore(nc, events.StoreOptions{Logger: logger})
	if err != nil {
		return err
	}
	if *provision {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := events.Provision(pctx, st.JetStream(), events.ProvisionOptions{Replicas: *replicas})
		cancel()
		if err != nil {
			return err
		}
	}
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		return fmt.Errorf("open the %s bucket (provision the streams, or pass --provision): %w", events.BucketIntent, err)
	}
	obj, err := st.JetStream().ObjectStore(ctx, events.BucketOperatorState)
	if err != nil {
		return fmt.Errorf("open the %s object store (provision the streams, or pass --provision): %w", events.BucketOperatorState, err)
	}
	o.Store, o.Reader, o.IntentKV, o.Checkpoints, o.Devices, o.ExposureIndex = st, st, kv, obj, st, st
	if *presencePassword != "" {
		pc, err := presenceConn(*natsURL, *presencePassword)
		if err != nil {
			return err
		}
		defer pc.Close()
		o.Presence, o.PresenceResync, o.PresenceStaleSilence = pc, *presenceResync, *presenceStale
	}
	err = operator.Run(ctx, o)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// limitedKubeConfig is kubeConfig (the kubeconfig file; empty: $KUBECONFIG,
// then in-cluster) with the client-side rate limit of --kube-api-qps and
// --kube-api-burst. client-go's own default (5 requests a second, bursts of
// 10), which a kubeconfig file gives, would hold a fleet's Device controller
// to a few Devices a second; controller-runtime's in-cluster default is no
// client-side limit, and so is this one.
func limitedKubeConfig(path string, qps float64, burst int) (*rest.Config, error) {
	switch {
	case qps == 0:
		return nil, errors.New("--kube-api-qps is 0: use a positive rate, or -1 for no client-side limit (client-go would read 0 as 5 requests a second)")
	case qps > 0 && burst < 1:
		return nil, fmt.Errorf("--kube-api-burst is %d: use a positive count with --kube-api-qps %g", burst, qps)
	}
	cfg, err := kubeConfig(path)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	return cfg, nil
}

// openbaoAdmin returns the OpenBao client of the policy sync.
func openbaoAdmin(url, jwtMount, kvMount, tokenFile, caFile string) (*openbao.Client, error) {
	raw, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("--openbao-token-file: %w", err)
	}
	token := strings.TrimSpace(string(raw))
	if token == "" {
		return nil, fmt.Errorf("--openbao-token-file %s is empty", tokenFile)
	}
	cfg := openbao.Config{Address: url, JWTMount: jwtMount, KVMount: kvMount}
	if caFile != "" {
		hc, err := openbao.HTTPClientWithCA(caFile)
		if err != nil {
			return nil, fmt.Errorf("--openbao-ca-file: %w", err)
		}
		cfg.HTTPClient = hc
	}
	c, err := openbao.NewWithToken(cfg, token)
	if err != nil {
		return nil, fmt.Errorf("--openbao-url: %w", err)
	}
	return c, nil
}

// serviceAccountNamespace holds the namespace of the pod's service account
// in a cluster: the Lease's when no namespace is given.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// logHandler is the slog handler of --log-format: json or text on out.
func logHandler(format string, out io.Writer) (slog.Handler, error) {
	switch format {
	case "json":
		return slog.NewJSONHandler(out, nil), nil
	case "text":
		return slog.NewTextHandler(out, nil), nil
	}
	return nil, fmt.Errorf("--log-format %q: use json or text", format)
}

// presenceConn connects the system account's fleet-presence user with the
// password in file (ADR 0032).
func presenceConn(url, file string) (*nats.Conn, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--presence-password-file: %w", err)
	}
	password := strings.TrimSpace(string(raw))
	if password == "" {
		return nil, fmt.Errorf("--presence-password-file %s is empty", file)
	}
	nc, err := nats.Connect(url, nats.Name(authcallout.PresenceUser), nats.UserInfo(authcallout.PresenceUser, password),
		nats.CustomInboxPrefix(authcallout.InboxPrefix(authcallout.PresenceUser)), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("connect %s to NATS at %s: %w", authcallout.PresenceUser, url, err)
	}
	return nc, nil
}

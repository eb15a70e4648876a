package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
)

const logsUsage = `usage: fleet logs <namespace>/<device> <deployment>/<service> [flags]

Prints what a service (or the init container) of a Deployment printed on a
device, stdout and stderr with the engine's timestamps, read through the
device's agent (ADR 0025). Secret values are redacted on the device;
terminal escapes and control characters are shown escaped. -f follows
until Ctrl-C, the device disconnects (said plainly) or 30 minutes pass.

You need the verb get on devices/log (group fleet.nationtech.io) in the
Device's namespace: fleet logs asks the API server as the user of your
kubeconfig. Every attempt, allowed or refused, is recorded in FLEET_AUDIT.
NATS is reached like fleet history (NATS_URL, NATS_USER, NATS_PASSWORD,
NATS_CREDS). docs/fleet.md.

  fleet logs lab/podman-1 analysis-api/web -f
  fleet logs lab/podman-1 analysis-api/web --tail 50 --since 10m

flags (anywhere after the command):
`

// runLogs is `fleet logs`.
func runLogs(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return logsCmd(ctx, args, os.Stdout, os.Stderr, os.Getenv)
}

// logsOptions are a validated `fleet logs` command line.
type logsOptions struct {
	nats                historyOptions
	kubeconfig          string
	request             devicelogs.Request
	since               time.Duration
	timeout             time.Duration
	answerTimeout       time.Duration
	namespace, device   string
	deployment, service string
	tail                int
	follow              bool
}

// parseLogs reads the flags and the two positional arguments.
func parseLogs(args []string, errOut io.Writer, getenv func(string) string) (logsOptions, error) {
	var o logsOptions
	fs := flag.NewFlagSet("fleet logs", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() { fmt.Fprint(errOut, logsUsage); fs.PrintDefaults() }
	fs.IntVar(&o.tail, "tail", 0, "the last N lines first (0: every line the engine kept)")
	fs.DurationVar(&o.since, "since", 0, "only lines printed in this last while (10m, 1h30m; 0: all)")
	fs.BoolVar(&o.follow, "f", false, "follow: go on printing new lines until Ctrl-C or the device disconnects")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
	fs.StringVar(&o.nats.server, "server", "", "NATS server URL (default: env NATS_URL, then "+defaultNATSURL+")")
	fs.StringVar(&o.nats.user, "user", "", "NATS user (default: env NATS_USER; fleet dev: fleet-dev-admin)")
	fs.StringVar(&o.nats.password, "password", "", "NATS password (default: env NATS_PASSWORD; fleet dev: <data>/secrets/admin.password)")
	fs.StringVar(&o.nats.creds, "creds", "", "NATS user credentials file, instead of --user/--password (default: env NATS_CREDS)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long the Kubernetes and NATS requests before the first line may take")
	fs.DurationVar(&o.answerTimeout, "answer-timeout", devicelogs.DefaultAnswerTimeout, "how long the device may take to answer")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return o, err
	}
	o.nats.server = cmp.Or(o.nats.server, getenv("NATS_URL"), defaultNATSURL)
	o.nats.user = cmp.Or(o.nats.user, getenv("NATS_USER"))
	o.nats.password = cmp.Or(o.nats.password, getenv("NATS_PASSWORD"))
	o.nats.creds = cmp.Or(o.nats.creds, getenv("NATS_CREDS"))
	if len(pos) != 2 {
		fs.Usage()
		return o, fmt.Errorf("logs: name the device as <namespace>/<device> and the container as <deployment>/<service> (got %d arguments)", len(pos))
	}
	var ok bool
	if o.namespace, o.device, ok = strings.Cut(pos[0], "/"); !ok || o.namespace == "" || o.device == "" || strings.Contains(o.device, "/") {
		return o, fmt.Errorf("logs: %q is not <namespace>/<device>: name the device as lab/podman-1", pos[0])
	}
	if o.deployment, o.service, ok = strings.Cut(pos[1], "/"); !ok || o.deployment == "" || o.service == "" || strings.Contains(o.service, "/") {
		return o, fmt.Errorf("logs: %q is not <deployment>/<service>: name the container as analysis-api/web", pos[1])
	}
	switch {
	case o.tail < 0:
		return o, errors.New("logs: --tail must be 0 (every line) or more")
	case o.since < 0:
		return o, errors.New("logs: --since must be a positive duration such as 10m")
	case o.timeout <= 0:
		return o, errors.New("logs: --timeout must be positive")
	case o.answerTimeout <= 0:
		return o, errors.New("logs: --answer-timeout must be positive")
	}
	o.request = devicelogs.Request{Namespace: o.namespace, Device: o.device, Deployment: o.deployment, Service: o.service,
		Tail: o.tail, Follow: o.follow}
	check := o.request
	check.Who = devicelogs.Who{User: "you", Via: events.ViaCLI} // learnt from the API server later
	if err := check.Validate(); err != nil {
		return o, fmt.Errorf("logs: %w", err)
	}
	return o, nil
}

// logsCmd runs `fleet logs`: lines to out, what happened to errOut.
func logsCmd(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) error {
	o, err := parseLogs(args, errOut, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	setup, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rs, err := openDeviceReader(setup, "logs", o.kubeconfig, o.nats, o.answerTimeout)
	if err != nil {
		return err
	}
	defer rs.close()
	access, user, rd := rs.access, rs.user, rs.reader
	r := o.request
	r.Who = devicelogs.Who{User: user, Via: events.ViaCLI}
	if o.since > 0 {
		r.Since = time.Now().Add(-o.since)
	}
	s, err := rd.Open(setup, r, access)
	if err != nil {
		return fmt.Errorf("logs %s/%s %s/%s: %w", o.namespace, o.device, o.deployment, o.service, err)
	}
	defer s.Close()
	for {
		lines, err := s.Next(ctx)
		for _, l := range lines {
			ts := "-"
			if !l.Time.IsZero() {
				ts = l.Time.UTC().Format(time.RFC3339Nano)
			}
			fmt.Fprintf(out, "%s %s\n", ts, devicelogs.PrintableLine(l.Text))
		}
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case ctx.Err() != nil:
			fmt.Fprintln(errOut, "fleet logs: stopped; the device was asked to stop sending")
			return nil
		case err != nil:
			return fmt.Errorf("logs %s/%s %s/%s: %w", o.namespace, o.device, o.deployment, o.service, err)
		}
	}
}

// connectNATS connects name with the credentials the flags name.
func connectNATS(name string, o historyOptions) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name(name), nats.Timeout(5 * time.Second), nats.MaxReconnects(0)}
	switch {
	case o.creds != "" && (o.user != "" || o.password != ""):
		return nil, errors.New("--creds and --user/--password exclude each other (check NATS_CREDS, NATS_USER, NATS_PASSWORD): give one")
	case o.creds != "":
		opts = append(opts, nats.UserCredentials(o.creds))
	case o.password != "" && o.user == "":
		return nil, errors.New("--password needs --user (fleet dev: --user fleet-dev-admin, or NATS_USER)")
	case o.user != "":
		opts = append(opts, nats.UserInfo(o.user, o.password))
	}
	nc, err := nats.Connect(o.server, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w: check --server/NATS_URL and --user/--password or --creds (fleet dev prints the export line)", redact(o.server), err)
	}
	return nc, nil
}

// deviceReader is what fleet logs and fleet diagnose ask a device with: the
// caller's Kubernetes access (who they are, what they may read), a NATS
// connection and the devicelogs reader on it.
type deviceReader struct {
	access devicelogs.KubeAccess
	user   string
	nc     *nats.Conn
	reader *devicelogs.Reader
}

// openDeviceReader connects as the flags say; cmd names the command in
// errors ("logs", "diagnose").
func openDeviceReader(ctx context.Context, cmd, kubeconfig string, no historyOptions, answerTimeout time.Duration) (*deviceReader, error) {
	cfg, err := restConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("%s: --kubeconfig: %w", cmd, err)
	}
	scheme := runtime.NewScheme()
	if err := authnv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := authzv1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	kc, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("%s: Kubernetes client (--kubeconfig): %w", cmd, err)
	}
	rs := &deviceReader{access: devicelogs.KubeAccess{Client: kc}}
	if rs.user, err = rs.access.User(ctx); err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	if rs.nc, err = connectNATS("fleet "+cmd, no); err != nil {
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	store, err := events.NewStore(rs.nc, events.StoreOptions{})
	if err != nil {
		rs.nc.Close()
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	if rs.reader, err = devicelogs.New(devicelogs.Options{Conn: rs.nc, Store: store, AnswerTimeout: answerTimeout}); err != nil {
		rs.nc.Close()
		return nil, fmt.Errorf("%s: %w", cmd, err)
	}
	return rs, nil
}

// close closes the connection.
func (rs *deviceReader) close() { rs.nc.Close() }

package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
)

const historyUsage = `usage: fleet history <query> [flags]

Answers from the JetStream streams alone (no Kubernetes API needed):

  fleet history deployment <namespace>/<name>   revisions, rollout transitions, per-device results,
                                                Degraded and recovered devices
  fleet history taskrun <namespace>/<name>      a TaskRun's targets and every device's result, reports
  fleet history device <device-id>              intents received, reports (health included), inventory
                                                changes, commands, its last containers
  fleet history fleet --at <RFC 3339 time>      every device's desired vs reported state and every
                                                Deployment's rollout state, as of that time
  fleet history exposure --image <ref or digest>  every device that ran it, under which revision, from
                                                when to when (fleet history exposure -h)

Connect like the nats CLI: fleet dev prints
  export NATS_URL=nats://127.0.0.1:4222 NATS_USER=fleet-dev-admin NATS_PASSWORD="$(cat …/admin.password)"
and fleet history reads the same variables.

flags (anywhere after the query):
`

// defaultNATSURL is where fleet dev's embedded server listens by default.
const defaultNATSURL = "nats://127.0.0.1:4222"

// runHistory is `fleet history`.
func runHistory(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return historyCmd(ctx, args, os.Stdout, os.Stderr, os.Getenv)
}

// historyOptions are the flags of `fleet history`.
type historyOptions struct {
	server, user, password, creds string
	at, output                    string
	timeout                       time.Duration
	verbose                       bool
}

// historyQuery is a validated `fleet history` query.
type historyQuery struct {
	// kind is deployment, taskrun, device or fleet.
	kind string
	// namespace and name are the Deployment (deployment) or TaskRun
	// (taskrun).
	namespace, name string
	// device is the device id (device).
	device string
	// at is the instant (fleet).
	at     time.Time
	format history.Format
}

// historyCmd runs `fleet history` with its arguments, writing the answer to
// out and usage and logs to errOut; getenv supplies the NATS_* defaults.
func historyCmd(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) error {
	if len(args) > 0 && args[0] == "exposure" {
		return exposureCmd(ctx, args[1:], out, errOut, getenv)
	}
	o, q, err := parseHistory(args, errOut, getenv)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	answer, err := queryHistory(ctx, o, q, errOut)
	if err != nil {
		return err
	}
	return history.Write(out, answer, q.format)
}

// newHistoryFlags returns the flag set of `fleet history`, bound to o.
func newHistoryFlags(o *historyOptions, errOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("fleet history", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), historyUsage)
		fs.PrintDefaults()
	}
	// Defaults from the environment are applied after parsing, so that
	// usage text never prints them (NATS_PASSWORD, or a URL with one).
	fs.StringVar(&o.server, "server", "", "NATS server URL (default: env NATS_URL, then "+defaultNATSURL+")")
	fs.StringVar(&o.user, "user", "", "NATS user (default: env NATS_USER; fleet dev: fleet-dev-admin)")
	fs.StringVar(&o.password, "password", "", "NATS password (default: env NATS_PASSWORD; fleet dev: <data>/secrets/admin.password)")
	fs.StringVar(&o.creds, "creds", "", "NATS user credentials file, instead of --user/--password (default: env NATS_CREDS)")
	fs.StringVar(&o.at, "at", "", "fleet only: the instant to look at, RFC 3339 (2026-01-02T15:04:05Z, fractions and offsets allowed)")
	fs.StringVar(&o.output, "o", "text", "output format: text or json")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "give up after this long")
	fs.BoolVar(&o.verbose, "v", false, "log each stream read to stderr")
	return fs
}

// parseHistory parses the flags and the query; flag.ErrHelp (unwrapped)
// when help was asked for and printed.
func parseHistory(args []string, errOut io.Writer, getenv func(string) string) (historyOptions, historyQuery, error) {
	var o historyOptions
	fs := newHistoryFlags(&o, errOut)
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return o, historyQuery{}, err
	}
	o.server = cmp.Or(o.server, getenv("NATS_URL"), defaultNATSURL)
	o.user = cmp.Or(o.user, getenv("NATS_USER"))
	o.password = cmp.Or(o.password, getenv("NATS_PASSWORD"))
	o.creds = cmp.Or(o.creds, getenv("NATS_CREDS"))
	if len(pos) == 0 {
		fs.Usage()
		return o, historyQuery{}, errors.New("history: no query given: use deployment, taskrun, device or fleet")
	}
	format, err := history.ParseFormat(o.output)
	if err != nil {
		return o, historyQuery{}, fmt.Errorf("history: -o: %w", err)
	}
	q, err := historyQueryOf(pos, o.at)
	q.format = format
	return o, q, err
}

// parseInterspersed parses args with flags before or after the positional
// arguments, and returns the positional ones; flag.ErrHelp unwrapped.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); errors.Is(err, flag.ErrHelp) {
			return nil, flag.ErrHelp
		} else if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		rest = fs.Args()[1:]
	}
}

// historyQueryOf validates the positional arguments (pos[0] is the query)
// and --at. An unknown query is one error line (no usage text, which
// would scroll it away).
func historyQueryOf(pos []string, atFlag string) (historyQuery, error) {
	q := historyQuery{kind: pos[0]}
	switch q.kind {
	case "deployment", "taskrun", "device":
		if len(pos) != 2 {
			return q, fmt.Errorf("history %s: give exactly one %s", q.kind, map[string]string{
				"deployment": "<namespace>/<name>, e.g. fleet history deployment lab/analysis-api",
				"taskrun":    "<namespace>/<name>, e.g. fleet history taskrun lab/upgrade-2026-12",
				"device":     "<device-id>, e.g. fleet history device sim-1"}[q.kind])
		}
		if atFlag != "" {
			return q, fmt.Errorf("history %s: --at applies to `fleet history fleet` only: a timeline always shows everything stored", q.kind)
		}
	case "fleet":
		if len(pos) != 1 {
			return q, fmt.Errorf("history fleet: unexpected argument %q: the only input is --at", pos[1])
		}
		if atFlag == "" {
			return q, errors.New("history fleet: --at is required: give an RFC 3339 time such as " + time.Now().UTC().Truncate(time.Second).Format(time.RFC3339))
		}
		at, err := time.Parse(time.RFC3339Nano, atFlag)
		if err != nil {
			return q, fmt.Errorf("history fleet: --at %q is not an RFC 3339 time: use e.g. 2026-01-02T15:04:05Z or 2026-01-02T16:04:05.5+01:00", atFlag)
		}
		q.at = at
	default:
		return q, fmt.Errorf("history: unknown query %q: use deployment, taskrun, device or fleet (fleet history -h prints the usage)", q.kind)
	}
	switch q.kind {
	case "deployment", "taskrun":
		var ok bool
		q.namespace, q.name, ok = strings.Cut(pos[1], "/")
		if !ok || q.namespace == "" || q.name == "" || strings.Contains(q.name, "/") {
			return q, fmt.Errorf("history %s: %q is not <namespace>/<name>: give both, e.g. lab/analysis-api", q.kind, pos[1])
		}
	case "device":
		q.device = pos[1]
	}
	return q, nil
}

// queryHistory connects to NATS and answers q from the streams.
func queryHistory(ctx context.Context, o historyOptions, q historyQuery, errOut io.Writer) (history.Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	h, closeHistory, err := openHistory(o, "history", errOut)
	if err != nil {
		return nil, err
	}
	defer closeHistory()
	var answer history.Answer
	switch q.kind {
	case "deployment":
		answer, err = h.Deployment(ctx, q.namespace, q.name)
	case "taskrun":
		answer, err = h.TaskRun(ctx, q.namespace, q.name)
	case "device":
		answer, err = h.Device(ctx, q.device)
	case "fleet":
		answer, err = h.FleetAt(ctx, q.at)
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w (the Fleet streams are missing on %s: is --server a Fleet control plane with its streams provisioned?)", err, redact(o.server))
	}
	if err != nil {
		return nil, err
	}
	return answer, nil
}

// openHistory connects as the flags say and returns the history reader on
// the connection and how to close it; cmd names the command in errors, its
// log goes to errOut (debug with --verbose).
func openHistory(o historyOptions, cmd string, errOut io.Writer) (*history.History, func(), error) {
	level := slog.LevelWarn
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(errOut, &slog.HandlerOptions{Level: level}))
	nc, err := connectHistory(o)
	if err != nil {
		return nil, nil, err
	}
	st, err := events.NewStore(nc, events.StoreOptions{Logger: log})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	h, err := history.New(history.Options{Reader: st, Logger: log})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%s: %w", cmd, err)
	}
	return h, nc.Close, nil
}

// connectHistory connects with the credentials the flags name.
func connectHistory(o historyOptions) (*nats.Conn, error) {
	opts := []nats.Option{nats.Name("fleet history"), nats.Timeout(5 * time.Second), nats.MaxReconnects(0)}
	switch {
	case o.creds != "" && (o.user != "" || o.password != ""):
		return nil, errors.New("history: --creds and --user/--password exclude each other (check NATS_CREDS, NATS_USER, NATS_PASSWORD): give one")
	case o.creds != "":
		opts = append(opts, nats.UserCredentials(o.creds))
	case o.password != "" && o.user == "":
		return nil, errors.New("history: --password needs --user (fleet dev: --user fleet-dev-admin, or NATS_USER)")
	case o.user != "":
		opts = append(opts, nats.UserInfo(o.user, o.password))
	}
	nc, err := nats.Connect(o.server, opts...)
	if errors.Is(err, nats.ErrAuthorization) || (err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization")) {
		return nil, fmt.Errorf("history: connect to NATS at %s: %w: check --user/--password or --creds (fleet dev prints the export line with NATS_USER and NATS_PASSWORD)", redact(o.server), err)
	}
	if err != nil {
		return nil, fmt.Errorf("history: connect to NATS at %s: %w: set --server or NATS_URL to the control plane's NATS (fleet dev: %s)", redact(o.server), err, defaultNATSURL)
	}
	return nc, nil
}

// redact hides a password in a server URL (nats://user:pass@host).
func redact(servers string) string {
	parts := strings.Split(servers, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

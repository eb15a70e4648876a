package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"

	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

const simulateUsage = `usage: fleet rollout simulate -f deployment.yaml [--from T] [--to T] [flags]
       fleet rollout simulate --recorded <namespace>/<name> [flags]

Replays a Deployment's rollout plan (canaries, batches, thresholds, soak,
approval, disruption budget, progress deadline) against the fleet's recorded
behaviour — each device's time from being handed a revision to its first
Converged or Failed report, its failures and its silences, from the
JetStream streams — and prints the predicted stages and timeline. The same
seed gives the same prediction. --recorded simulates every recorded
revision of a Deployment with its own plan against the history before it
and compares with what happened. docs/history.md.

flags:
`

// simulateOptions are the flags of `fleet rollout simulate`.
type simulateOptions struct {
	historyOptions
	file, recorded, from, to, approval string
	seed                               uint64
	deadline, targetTimeout            time.Duration
}

// simulateCmd runs `fleet rollout simulate`.
func simulateCmd(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) error {
	var o simulateOptions
	fs := newHistoryFlags(&o.historyOptions, errOut)
	fs.Init("fleet rollout simulate", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), simulateUsage)
		fs.PrintDefaults()
	}
	// A question over the whole history takes longer than a timeline.
	o.timeout = longHistoryTimeout
	fs.Lookup("timeout").DefValue = longHistoryTimeout.String()
	fs.Lookup("at").Usage = "not used: give --from and --to"
	fs.StringVar(&o.file, "f", "", "simulate: the Deployment manifest (YAML or JSON) whose rollout to predict")
	fs.StringVar(&o.recorded, "recorded", "", "simulate: compare every recorded revision of <namespace>/<name> with a simulation of its own plan")
	fs.StringVar(&o.from, "from", "", "simulate: learn the devices' behaviour from events stored at or after this RFC 3339 time (default: the first)")
	fs.StringVar(&o.to, "to", "", "simulate: ... and at or before this RFC 3339 time (default: the last); the simulated rollout starts here")
	fs.Uint64Var(&o.seed, "seed", 1, "simulate: the seed of the draws (the same seed gives the same prediction)")
	fs.StringVar(&o.approval, "approval-delay", "0s", "simulate: how long a manual approval takes (a duration), or never")
	fs.DurationVar(&o.deadline, "progress-deadline", history.DefaultSimProgressDeadline, "simulate: the operator's --progress-deadline, for a plan that sets none")
	fs.DurationVar(&o.targetTimeout, "target-timeout", history.DefaultSimTargetTimeout, "simulate: the operator's --target-timeout, after which a silent target is removed")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("rollout simulate: unexpected argument %q: give -f deployment.yaml or --recorded <namespace>/<name>", pos[0])
	}
	if (o.file == "") == (o.recorded == "") {
		return errors.New("rollout simulate: give exactly one of -f deployment.yaml (predict it) and --recorded <namespace>/<name> (check the simulator against its recorded rollouts)")
	}
	if o.at != "" {
		return errors.New("rollout simulate: --at does not apply: use --from and --to")
	}
	so := history.SimulateOptions{Seed: o.seed, ProgressDeadline: o.deadline, TargetTimeout: o.targetTimeout}
	switch o.approval {
	case "never":
		so.ApprovalDelay = -1
	default:
		d, err := time.ParseDuration(o.approval)
		if err != nil || d < 0 {
			return fmt.Errorf("rollout simulate: --approval-delay %q: give a duration such as 0s or 2h, or never", o.approval)
		}
		so.ApprovalDelay = d
	}
	var from, to time.Time
	for _, f := range []struct {
		name, v string
		t       *time.Time
	}{{"--from", o.from, &from}, {"--to", o.to, &to}} {
		if f.v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f.v)
		if err != nil {
			return fmt.Errorf("rollout simulate: %s %q is not an RFC 3339 time: use e.g. 2026-01-02T15:04:05Z", f.name, f.v)
		}
		*f.t = t
	}
	var dep *fleetv1.Deployment
	var ns, name string
	if o.file != "" {
		if dep, err = readDeployment(o.file); err != nil {
			return err
		}
	} else {
		var ok bool
		ns, name, ok = strings.Cut(o.recorded, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("rollout simulate: --recorded %q is not <namespace>/<name>: give both, e.g. lab/analysis-api", o.recorded)
		}
	}
	format, err := history.ParseFormat(o.output)
	if err != nil {
		return fmt.Errorf("rollout simulate: -o: %w", err)
	}
	o.server = cmp.Or(o.server, getenv("NATS_URL"), defaultNATSURL)
	o.user = cmp.Or(o.user, getenv("NATS_USER"))
	o.password = cmp.Or(o.password, getenv("NATS_PASSWORD"))
	o.creds = cmp.Or(o.creds, getenv("NATS_CREDS"))
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	h, closeHistory, err := openHistory(o.historyOptions, "rollout simulate", errOut)
	if err != nil {
		return err
	}
	defer closeHistory()
	var answer history.Answer
	if dep != nil {
		answer, err = h.SimulateDeployment(ctx, dep, from, to, so)
	} else {
		answer, err = h.SimulateRecorded(ctx, ns, name, so)
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("%w (the Fleet streams are missing on %s: is --server a Fleet control plane with its streams provisioned?)", err, redact(o.server))
	}
	if err != nil {
		return fmt.Errorf("rollout simulate: %w", err)
	}
	return history.Write(out, answer, format)
}

// readDeployment reads a Deployment manifest, refusing fields it does not
// know.
func readDeployment(path string) (*fleetv1.Deployment, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("rollout simulate: -f: %w", err)
	}
	var d fleetv1.Deployment
	if err := yaml.UnmarshalStrict(b, &d); err != nil {
		return nil, fmt.Errorf("rollout simulate: -f %s: %w: give a Fleet Deployment manifest (apiVersion fleet.nationtech.io/v1alpha1, kind Deployment)", path, err)
	}
	if d.Kind != "Deployment" {
		return nil, fmt.Errorf("rollout simulate: -f %s: kind %q: give a Fleet Deployment manifest (kind Deployment)", path, d.Kind)
	}
	if d.Namespace == "" {
		d.Namespace = "default"
	}
	return &d, nil
}

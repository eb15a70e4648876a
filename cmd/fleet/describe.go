package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nationtech/harmony-fleet/devicelogs"
	"github.com/nationtech/harmony-fleet/events"
)

const describeUsage = `usage: fleet describe device <namespace>/<device> [flags]
       fleet diagnose <namespace>/<device> [flags]

Asks the device's agent for a diagnosis (ADR 0025): per Deployment, each
container's state, restarts, exit code, health, image digest and ports;
the host's free disk and memory, the container engine and its version,
the device's clock against this machine's, the agent's last passes and
the last status it reported of each Deployment. Needs the verb get on
devices/log, like fleet logs; every attempt is recorded in FLEET_AUDIT.
docs/fleet.md.

flags (anywhere after the command):
`

// runDescribe is `fleet describe device` and `fleet diagnose`.
func runDescribe(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return describeCmd(ctx, args, os.Stdout, os.Stderr, os.Getenv)
}

// describeCmd runs `fleet diagnose <ns>/<device>` (args without
// "describe device").
func describeCmd(ctx context.Context, args []string, out, errOut io.Writer, getenv func(string) string) error {
	var o logsOptions
	fs := flag.NewFlagSet("fleet diagnose", flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() { fmt.Fprint(errOut, describeUsage); fs.PrintDefaults() }
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
	fs.StringVar(&o.nats.server, "server", "", "NATS server URL (default: env NATS_URL, then "+defaultNATSURL+")")
	fs.StringVar(&o.nats.user, "user", "", "NATS user (default: env NATS_USER; fleet dev: fleet-dev-admin)")
	fs.StringVar(&o.nats.password, "password", "", "NATS password (default: env NATS_PASSWORD; fleet dev: <data>/secrets/admin.password)")
	fs.StringVar(&o.nats.creds, "creds", "", "NATS user credentials file, instead of --user/--password (default: env NATS_CREDS)")
	fs.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long the whole diagnosis may take")
	fs.DurationVar(&o.answerTimeout, "answer-timeout", devicelogs.DefaultAnswerTimeout, "how long the device may take to answer")
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	o.nats.server = firstOf(o.nats.server, getenv("NATS_URL"), defaultNATSURL)
	o.nats.user = firstOf(o.nats.user, getenv("NATS_USER"))
	o.nats.password = firstOf(o.nats.password, getenv("NATS_PASSWORD"))
	o.nats.creds = firstOf(o.nats.creds, getenv("NATS_CREDS"))
	if len(pos) != 1 {
		fs.Usage()
		return fmt.Errorf("diagnose: name one device as <namespace>/<device> (got %d arguments)", len(pos))
	}
	var ok bool
	if o.namespace, o.device, ok = strings.Cut(pos[0], "/"); !ok || o.namespace == "" || o.device == "" || strings.Contains(o.device, "/") {
		return fmt.Errorf("diagnose: %q is not <namespace>/<device>: name the device as lab/podman-1", pos[0])
	}
	if o.timeout <= 0 || o.answerTimeout <= 0 {
		return errors.New("diagnose: --timeout and --answer-timeout must be positive")
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rs, err := openDeviceReader(ctx, "diagnose", o.kubeconfig, o.nats, o.answerTimeout)
	if err != nil {
		return err
	}
	defer rs.close()
	access, user, rd := rs.access, rs.user, rs.reader
	d, err := rd.Diagnose(ctx, devicelogs.Request{Namespace: o.namespace, Device: o.device, Who: devicelogs.Who{User: user, Via: events.ViaCLI}}, access)
	if err != nil {
		return fmt.Errorf("diagnose %s/%s: %w", o.namespace, o.device, err)
	}
	printDiagnosis(out, o.namespace+"/"+o.device, d)
	return nil
}

// firstOf is the first non-empty string.
func firstOf(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// printDiagnosis writes d as text; every string the device sent is made
// printable.
func printDiagnosis(out io.Writer, device string, d devicelogs.Diagnosis) {
	p := devicelogs.PrintableLine
	fmt.Fprintf(out, "device %s: agent %s, engine %s, clock %+.3fs against this machine\n", device, p(firstOf(d.AgentVersion, "?")),
		p(firstOf(d.Engine, "?")), d.ClockOffset.Seconds())
	fmt.Fprintf(out, "host: disk %s free of %s, memory %s available of %s\n", size(d.DiskFree), size(d.DiskTotal), size(d.MemAvailable), size(d.MemTotal))
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nDEPLOYMENT\tGENERATION\tCONTAINER\tROLE\tSTATE\tRESTARTS\tEXIT\tHEALTH\tIMAGE\tPORTS")
	for _, w := range d.Containers.Workloads {
		for _, c := range w.Containers {
			exit := fmt.Sprint(c.ExitCode)
			if c.Signal != "" {
				exit += " (" + p(c.Signal) + ")"
			}
			if c.OOMKilled {
				exit += " OOM"
			}
			ports := strings.Join(d.Ports[w.Namespace+"/"+w.Deployment+"/"+c.Name], ",")
			fmt.Fprintf(tw, "%s/%s\t%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", p(w.Namespace), p(w.Deployment), w.Generation, p(c.Name), p(c.Role),
				p(c.State), c.Restarts, exit, p(firstOf(c.Health, "-")), p(firstOf(c.ImageDigest, "-")), p(firstOf(ports, "-")))
		}
	}
	_ = tw.Flush()
	if d.Containers.Truncated {
		fmt.Fprintln(out, "(the device left containers out to fit its answer)")
	}
	fmt.Fprintln(out, "\nlast passes:")
	for _, ps := range d.Passes {
		fmt.Fprintf(out, "  %s  %-9s %.2fs\n", ps.At.UTC().Format(time.RFC3339), p(ps.Result), ps.Seconds)
	}
	fmt.Fprintln(out, "\nlast reports:")
	for _, ws := range d.Workloads {
		line := fmt.Sprintf("  %s/%s generation %d: %s", p(ws.Namespace), p(ws.Deployment), ws.Generation, p(string(ws.Phase)))
		if ws.Error != "" {
			line += ": " + p(ws.Error)
		}
		fmt.Fprintln(out, line)
	}
}

// size is n bytes in GiB or MiB; "?" for 0.
func size(n uint64) string {
	switch {
	case n == 0:
		return "?"
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	default:
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	}
}

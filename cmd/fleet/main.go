// Command fleet is the Fleet admin tool for a laptop: `fleet dev` runs the
// control plane on one machine (package dev), `fleet enroll`
// enrolls, re-enrolls and revokes devices (package enroll), `fleet
// history` answers questions about the past (package history), `fleet
// logs` reads what a device's service printed and `fleet describe device`
// (`fleet diagnose`) asks a device for a diagnosis (package devicelogs), `fleet
// rollout` asks the operator to pause, resume or approve a rollout and
// `fleet token` mints a device's id_token and checks it as the auth callout
// would (package identity/tokencheck). It is wiring only: flags, the
// packages' calls and what they print. See docs/fleet.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	// The tz database, for the time zones devices report (events.LoadTimeZone)
	// on a machine without one.
	_ "time/tzdata"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/dev"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

const usage = `usage: fleet <command> [flags]

commands:
  dev       run the Fleet control plane on this machine
  enroll    enroll, re-enroll or revoke a device (-dev: at a running fleet dev)
  history   a Deployment's or device's timeline, or the fleet at a time, from the streams
  logs      what a service printed on a device, read through its agent (-f: follow)
  describe  describe device <ns>/<device>: the device's containers, host and agent (also: diagnose)
  rollout   pause, resume or approve a Deployment's rollout (as you, through the Kubernetes API)
  token     mint a device's id_token from its key file and check it as the auth callout would
`

func run(args []string) error {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return errors.New("no command given")
	}
	switch args[0] {
	case "dev":
		return runDev(args[1:])
	case "enroll":
		return runEnroll(args[1:])
	case "history":
		return runHistory(args[1:])
	case "logs":
		return runLogs(args[1:])
	case "diagnose":
		return runDescribe(args[1:])
	case "describe":
		if len(args) < 2 || args[1] != "device" {
			return errors.New("describe: only `fleet describe device <namespace>/<device>` exists")
		}
		return runDescribe(args[2:])
	case "rollout":
		return runRollout(args[1:])
	case "token":
		return runToken(args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return nil
	}
	fmt.Fprint(os.Stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func runDev(args []string) error {
	if len(args) > 0 && args[0] == "env" {
		return runDevEnv(args[1:])
	}
	var o dev.Options
	fs, verbose := devFlags(&o)
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	// controller-runtime (envtest) and zitadel/oidc log through globals;
	// zitadel/oidc's route registration records are noise below -v.
	ctrllog.SetLogger(logr.FromSlogHandler(o.Logger.Handler()))
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: max(level, slog.LevelWarn)})))
	if *verbose {
		slog.SetDefault(o.Logger)
	}
	o.Out = os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return dev.Run(ctx, o)
}

// devFlags are `fleet dev`'s flags, into o; the bool is -v.
func devFlags(o *dev.Options) (*flag.FlagSet, *bool) {
	fs := flag.NewFlagSet("fleet dev", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: fleet dev [flags]\n       fleet dev env [--data-dir <folder>]   print the running fleet dev's export lines again\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.DataDir, "data-dir", dev.DefaultDataDir(), "folder for state kept across runs (remove it, fleet dev stopped, to start afresh)")
	fs.IntVar(&o.NATSPort, "nats-port", 4222, "client port of the embedded NATS server (-1: any free port)")
	fs.StringVar(&o.Listen, "listen", dev.DefaultListen, "IP address NATS, the OpenID Provider and the OpenBao stand-in listen on (0.0.0.0: every interface, so a real device can attach; development only, no TLS)")
	fs.StringVar(&o.Advertise, "advertise", "", "host name or address a device reaches this machine at, used in every printed URL and the issuer (default: --listen, or the first non-loopback address with 0.0.0.0)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", dev.DefaultMetricsAddr, "where the Prometheus metrics of the operator, the auth callout and the devices are served (host:port; port 0: any free port)")
	fs.IntVar(&o.Devices, "devices", 3, "simulated devices to run (0: none); with Podman, "+dev.PodmanDevice+" runs besides them")
	fs.StringVar(&o.Runtime, "runtime", dev.RuntimeAuto, "auto (one device, "+dev.PodmanDevice+", on Podman when a Podman API socket answers, else simulated only), podman or sim")
	fs.StringVar(&o.PodmanSocket, "podman-socket", "", "Podman API socket, a path or unix:// URI (default: $XDG_RUNTIME_DIR/podman/podman.sock, then <repository>/.cache/run/podman.sock)")
	fs.StringVar(&o.Namespace, "namespace", "lab", "namespace of the Device resources and the examples")
	// No back quotes in usage texts: PrintDefaults would show the quoted
	// words as the flag's value name.
	fs.StringVar(&o.KubeBinDir, "kube-bin-dir", "", "folder with kube-apiserver, etcd and kubectl (default: <repository>/.cache/k8s-"+dev.KubernetesVersion+", built by \""+dev.SetupK8sCommand+"\")")
	fs.StringVar(&o.CRDDir, "crd-dir", "", "folder with the Fleet CRDs (default: <repository>/k8s/config/crd)")
	fs.StringVar(&o.AdmissionDir, "admission-dir", "", "folder with the admission policies shipped with the CRDs (default: <repository>/k8s/config/admission)")
	fs.StringVar(&o.NATSCLI, "nats-cli", "", "the nats CLI linked as <data-dir>/bin/nats for the printed next steps (default: $"+dev.NATSCLIEnv+
		", else <repository>/.cache/tools/natscli-v0.5.0/nats, built by \""+dev.SetupNATSCLICommand+"\", else nats on PATH)")
	return fs, fs.Bool("v", false, "log debug records")
}

// runDevEnv is `fleet dev env`: the export lines of the fleet dev running
// on --data-dir, again.
func runDevEnv(args []string) error {
	fs := flag.NewFlagSet("fleet dev env", flag.ContinueOnError)
	dataDir := fs.String("data-dir", dev.DefaultDataDir(), "the running fleet dev's data folder")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("dev env: unexpected %q: it takes --data-dir only", fs.Arg(0))
	}
	lines, err := dev.Env(*dataDir)
	if err != nil {
		return err
	}
	fmt.Print(lines)
	return nil
}

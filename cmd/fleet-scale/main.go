// Command fleet-scale runs the Harmony Fleet scale benchmark (`task
// bench:scale`): see package bench and docs/performance.md.
//
//	fleet-scale [-n 1000,10000] [-per-process 5000] [-rate 100] [-flooders 1] ...
//
// It re-executes itself as "fleet-scale child <mode> ..." for the processes
// that run the simulated devices.
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
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/nationtech/harmony-fleet/bench"
	"github.com/nationtech/harmony-fleet/internal/repo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet-scale:", err)
		os.Exit(1)
	}
}

// run is the command with its arguments (without the program name): ctx
// has no deadline, as the command's has none.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "child" {
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
		return bench.RunChild(ctx, args[1:], stdin, stdout, log)
	}
	fs := flag.NewFlagSet("fleet-scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		o             bench.Options
		sizes         string
		verbose       bool
		profile       string
		childProfiles string
	)
	fs.StringVar(&sizes, "n", "1000,10000", "device counts to run, comma-separated, in order")
	fs.IntVar(&o.PerProcess, "per-process", bench.DefaultPerProcess, fmt.Sprintf("most devices per agent process (1..%d)", bench.MaxPerProcess))
	fs.Float64Var(&o.ConnectRate, "rate", bench.DefaultConnectRate, "device connects per second the ramp is sized for (jitter window = N / rate)")
	fs.Float64Var(&o.FloorRate, "floor-rate", bench.DefaultFloorRate, "floor subscriber connects per second")
	fs.DurationVar(&o.Timeout, "timeout", bench.DefaultTimeout, "bound of each phase after its ramp window")
	fs.IntVar(&o.Flooders, "flooders", 0, fmt.Sprintf("flooding devices (0..%d): roll out a second revision per size while they flood their report subjects", bench.MaxFlooders))
	fs.BoolVar(&o.FloodWorkloadOnly, "flood-workload-only", false, "flooders publish small workload reports only (the rollout runner's worst case) instead of the mix")
	fs.IntVar(&o.Servers, "servers", 0, "run on a cluster of this many nats-server processes (0: the embedded server; 100,000 devices need at least 6)")
	fs.BoolVar(&o.FastSync, "fast-sync", false, "fsync every 2 minutes instead of on every write (the product default)")
	fs.StringVar(&o.DataDir, "data-dir", "", "folder for the JetStream store and key files (default: a temporary folder, removed)")
	fs.BoolVar(&verbose, "v", false, "log progress and the control plane's warnings")
	fs.StringVar(&profile, "cpuprofile", "", "write the control plane process's CPU profile of the measured phases to this file")
	fs.StringVar(&o.ServerMemoryLimit, "server-memlimit", "", "with -servers, each nats-server process's GOMEMLIMIT, such as 1600MiB (production sets one on its NATS nodes; empty: none)")
	fs.StringVar(&o.MemProfiles, "memprofile", "", "write heap profiles once every device connected to this folder: each nats-server process's (with -servers) and each agent process's")
	fs.StringVar(&childProfiles, "child-cpuprofile", "", "write each child process's CPU profile (agents, floor subscribers, flooders; from its start until it stops) to a file in this folder")
	fs.DurationVar(&o.TokenLifetime, "token-lifetime", bench.DefaultTokenLifetime, "id_token lifetime of the development provider: the user JWT expires with it and each connection is re-authorised (production: 10m; the default outlasts a run)")
	fs.DurationVar(&o.Hold, "hold", 0, "after each size's rollout, keep the devices connected this long (their user JWTs expire and are re-authorised every -token-lifetime), then roll out once more: the steady state's reconnects, callout and provider CPU, and no notification missed")
	fs.StringVar(&o.KeyCache.Dir, "key-cache", defaultKeyCache(), "folder caching the devices' RSA keys across runs (empty: the provider generates them every run)")
	fs.IntVar(&o.DistinctKeys, "distinct-keys", 0, "use at most this many distinct cached keys, device i key i mod this (0: one key per device); each device keeps its own user, key id, token and connection")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("-n %q: want comma-separated device counts such as 1000,10000", sizes)
		}
		o.Sizes = append(o.Sizes, n)
	}
	if fs.Arg(0) == "keys" {
		n := slices.Max(o.Sizes)
		// fleet-scale [-key-cache DIR] -n N keys: fill the key cache only
		// (run it at low priority ahead of a large run).
		if o.KeyCache.Dir == "" {
			return errors.New("keys: -key-cache is empty: name the folder to fill")
		}
		log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
		generated, err := o.KeyCache.Ensure(ctx, log, n)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "key cache %s holds keys for %d devices (%d generated now)\n", o.KeyCache.Dir, n, generated)
		return nil
	} else if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q: the only command is \"keys\"", fs.Args())
	}
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return err
		}
		defer f.Close()
		o.CPUProfile = f
	}
	if o.MemProfiles != "" {
		if err := os.MkdirAll(o.MemProfiles, 0o755); err != nil {
			return fmt.Errorf("-memprofile: %w", err)
		}
		abs, err := filepath.Abs(o.MemProfiles)
		if err != nil {
			return fmt.Errorf("-memprofile: %w", err)
		}
		o.MemProfiles = abs
	}
	if childProfiles != "" {
		// The children inherit the environment; each writes its own file.
		if err := os.MkdirAll(childProfiles, 0o755); err != nil {
			return fmt.Errorf("-child-cpuprofile: %w", err)
		}
		abs, err := filepath.Abs(childProfiles)
		if err != nil {
			return fmt.Errorf("-child-cpuprofile: %w", err)
		}
		if err := os.Setenv(bench.EnvChildCPUProfile, abs); err != nil {
			return fmt.Errorf("-child-cpuprofile: %w", err)
		}
	}
	level := slog.LevelError
	if verbose {
		level = slog.LevelInfo
	}
	o.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	o.Out = stdout
	o.ChildStderr = stderr
	_, err := bench.Run(ctx, o)
	if errors.Is(err, context.Canceled) {
		return errors.New("interrupted")
	}
	return err
}

// defaultKeyCache is .cache/scalebench-keys of the repository the command
// runs in, or empty outside one.
func defaultKeyCache() string {
	root, err := repo.Root()
	if err != nil {
		return ""
	}
	return filepath.Join(root, ".cache", "scalebench-keys")
}

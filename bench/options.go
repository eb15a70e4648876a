package bench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nationtech/harmony-fleet/internal/natscluster"
)

// Defaults of Options.
const (
	DefaultPerProcess  = 5000
	MaxPerProcess      = 8000
	DefaultConnectRate = 100
	DefaultFloorRate   = 2000
	DefaultTimeout     = 5 * time.Minute
	// DefaultTokenLifetime is Options.TokenLifetime's default.
	DefaultTokenLifetime = 2 * time.Hour
	// MaxFlooders is the most flooding devices a run may add.
	MaxFlooders = 100
)

// Goals the figures are printed against (never asserted).
const (
	GoalConverged = 10 * time.Second // for 10,000 devices
	// GoalConverged100k is the goal at 100,000 devices (on a cluster).
	GoalConverged100k = time.Minute
	GoalFloorFactor   = 3.0
)

// Options configure a benchmark run.
type Options struct {
	// Sizes are the device counts, run in this order on one control plane
	// (devices are enrolled once, for the largest size). Default 1000, 10000.
	Sizes []int
	// PerProcess is the most devices one child process runs (each costs an
	// open file). Default DefaultPerProcess; at most MaxPerProcess.
	PerProcess int
	// ConnectRate sizes the connection ramp: devices connect at uniformly
	// random moments over Sizes[i] / ConnectRate seconds, so that the
	// callout is not overloaded (docs/security.md). Default 100 per second
	// (250 per second overloaded the callout on the 2-core machine of
	// docs/performance.md).
	ConnectRate float64
	// FloorRate is the same for the floor's plain subscribers. Default 2000.
	FloorRate float64
	// Flooders, when positive, adds that many flooding devices (FlooderName
	// 1..Flooders): enrolled and connected through the callout like the
	// others (own key file, own id_token), never rollout targets. After the
	// rollout of each size, a second revision is rolled out to the same
	// devices while every flooder publishes as fast as it can on all of its
	// own report subjects, from just before the revision's append until the
	// runner appended rollout.succeeded: workload reports for the revision
	// that name other devices (Converged and Failed), a Failed report of
	// its own, garbage and bodies of DeviceMaxPayload bytes (Result.Flood;
	// docs/performance.md, "A flooding device"). At most MaxFlooders.
	Flooders int
	// FloodWorkloadOnly makes the flooders publish only their small
	// workload reports (the forged ones, their own, garbage): the most
	// records per second for the rollout runner to read, instead of the mix
	// whose bytes are mostly bodies at the payload limit.
	FloodWorkloadOnly bool
	// Timeout bounds each phase after its ramp window. Default 5 minutes.
	Timeout time.Duration
	// TokenLifetime is the development provider's id_token lifetime.
	// Default DefaultTokenLifetime: longer than a run, so that no
	// connection's user JWT expires in the middle of a measurement (expiry
	// and the reconnects it causes are BenchmarkReconnectStorm's subject).
	TokenLifetime time.Duration
	// Hold, when positive, keeps each size's devices connected this long
	// after its rollout (HoldResult): with a TokenLifetime shorter than
	// Hold every connection's user JWT expires and is re-authorised, so it
	// measures the steady state's token churn (reconnects a second, the
	// control plane's CPU); then a revision is rolled out to every device,
	// which converges only if no device missed its notification across
	// its reconnects.
	Hold time.Duration
	// CPUProfile, when set, receives the control plane process's CPU
	// profile of the measured phases (enrollment excluded).
	CPUProfile io.Writer
	// ServerMemoryLimit, when set, is each nats-server process's
	// GOMEMLIMIT with Servers (natscluster.Options.MemoryLimit), as the
	// production composition sets one on its NATS nodes: without it a
	// server's resident memory grows to about twice its live heap.
	ServerMemoryLimit string
	// MemProfiles, when set, is a folder receiving heap profiles once every
	// device connected: each nats-server process's (with Servers:
	// server-<name>.heap.pprof, from its prof_port) and each agent
	// process's (child-agents-<from>-<to>.heap.pprof), each after a forced
	// garbage collection.
	MemProfiles string
	// FastSync runs the server with the fsync interval policy instead of the
	// product's default (fsync on every write).
	FastSync bool
	// Servers, when positive, runs the run on a cluster of that many
	// nats-server processes (internal/natscluster: the product's callout
	// configuration, routes, fsync on every write unless FastSync) instead
	// of the embedded server: streams and buckets R3 from 3 servers on, two
	// callout replicas, the agent and floor processes spread over the
	// servers in turn. One server holds about 19,900 connections (the
	// open-file limit), so 100,000 devices need at least 6. At most
	// natscluster.MaxNodes; no flooders.
	Servers int
	// KeyCache, when its Dir is set, holds the devices' RSA keys across runs
	// (generated once, the missing ones at the start of a run, outside the
	// measured phases); enrollment then uploads each key's public half to
	// the provider instead of the provider generating one per device.
	// Without it the provider generates every key, every run.
	KeyCache KeyCache
	// DistinctKeys, when positive and smaller than the number of devices,
	// is how many distinct cached keys the devices use: device i (in
	// enrollment order) gets key i mod DistinctKeys. Each device still has
	// its own machine user, key id, key file, id_token and connection, and
	// a grant or a verification costs the same whatever the key; only the
	// one-time generation is shorter (about 50 ms of a core per key).
	// Needs KeyCache.
	DistinctKeys int
	// DataDir holds the JetStream store and the key files. Default: a
	// temporary folder, removed at the end.
	DataDir string
	// Exe and ExeArgs start a child: Exe ExeArgs... child <mode> <flags>;
	// the child must call RunChild. Default: this executable, no arguments.
	Exe     string
	ExeArgs []string
	// ChildStderr receives the children's logs. Default os.Stderr.
	ChildStderr io.Writer
	// Out receives the printed figures. Default io.Discard.
	Out io.Writer
	// Logger receives progress and the control plane's logs.
	Logger *slog.Logger
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	for _, n := range o.Sizes {
		if n < 1 {
			errs = append(errs, fmt.Errorf("scalebench: size %d: use at least 1 device", n))
		}
	}
	if o.PerProcess < 0 || o.PerProcess > MaxPerProcess {
		errs = append(errs, fmt.Errorf("scalebench: %d devices per process: use 1..%d (each costs an open file; the limit is 20,000)", o.PerProcess, MaxPerProcess))
	}
	if o.ConnectRate < 0 || o.FloorRate < 0 {
		errs = append(errs, errors.New("scalebench: connect rates must be positive"))
	}
	if o.DistinctKeys < 0 || (o.DistinctKeys > 0 && o.KeyCache.Dir == "") {
		errs = append(errs, errors.New("scalebench: distinct keys need a key cache (-key-cache) and a positive count"))
	}
	if o.Servers < 0 || o.Servers > natscluster.MaxNodes {
		errs = append(errs, fmt.Errorf("scalebench: %d servers: use 0 (the embedded server) or 1..%d nats-server processes", o.Servers, natscluster.MaxNodes))
	}
	if o.ServerMemoryLimit != "" && o.Servers == 0 {
		errs = append(errs, errors.New("scalebench: a server memory limit applies to nats-server processes: add -servers or drop -server-memlimit"))
	}
	if o.Servers > 0 && o.Flooders > 0 {
		errs = append(errs, errors.New("scalebench: flooders run on the embedded server only: drop -flooders or -servers"))
	}
	if o.Hold < 0 {
		errs = append(errs, fmt.Errorf("scalebench: hold %s: use 0 (none) or a positive duration", o.Hold))
	}
	if o.Flooders < 0 || o.Flooders > MaxFlooders {
		errs = append(errs, fmt.Errorf("scalebench: %d flooding devices: use 0..%d", o.Flooders, MaxFlooders))
	}
	return errors.Join(errs...)
}

func (o *Options) defaults() error {
	if len(o.Sizes) == 0 {
		o.Sizes = []int{1000, 10000}
	}
	if o.PerProcess == 0 {
		o.PerProcess = DefaultPerProcess
	}
	if o.ConnectRate == 0 {
		o.ConnectRate = DefaultConnectRate
	}
	if o.FloorRate == 0 {
		o.FloorRate = DefaultFloorRate
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.TokenLifetime == 0 {
		o.TokenLifetime = DefaultTokenLifetime
	}
	if o.Exe == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("scalebench: own executable: %w", err)
		}
		o.Exe = exe
	}
	if o.ChildStderr == nil {
		o.ChildStderr = os.Stderr
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

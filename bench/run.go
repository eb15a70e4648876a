package bench

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natscluster"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/score"
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
	// CPUProfile, when set, receives the control plane process's CPU
	// profile of the measured phases (enrollment excluded).
	CPUProfile io.Writer
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
	if o.Servers > 0 && o.Flooders > 0 {
		errs = append(errs, errors.New("scalebench: flooders run on the embedded server only: drop -flooders or -servers"))
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

// Result is what one size measured.
type Result struct {
	// N is the number of devices.
	N int
	// Children is the number of child processes the devices ran in.
	Children int
	// Ramp is the time from starting the children until every device had
	// connected through the callout and its agent had reported its
	// inventory; RampWindow is the jitter window the connects were spread
	// over.
	Ramp, RampWindow time.Duration
	// ConnectP50, P99 and Max are the devices' connect times (key file,
	// token grant, callout), ConnectRetries the failed attempts retried.
	ConnectP50, ConnectP99, ConnectMax time.Duration
	ConnectRetries                     int
	// Projected is the time from the revision's append until the rollout
	// runner had written every device's fleet-intent value; Converged until
	// every device had reported the revision Converged (workload reports
	// seen on the server); Succeeded until the runner appended
	// rollout.succeeded.
	Projected, Converged, Succeeded time.Duration
	// FloorAsync is the raw floor: N KV puts (published asynchronously) to
	// N plain subscribers, until every subscriber's answer was seen (the
	// better of two rounds, FloorAsyncRounds, one before and one after the
	// synchronous round); FloorSync the same with one synchronous put after
	// the other, as the runner writes.
	FloorAsync, FloorSync time.Duration
	FloorAsyncRounds      [2]time.Duration
	// FloorStoredAsync and FloorStoredSync are the same puts until every
	// subscriber answered the value's copy the bucket republishes once it
	// is stored (and synced): the floor of storing a value before its
	// device sees it, as the product does (a device is notified by the
	// fleet-intent bucket's republish).
	FloorStoredAsync, FloorStoredSync time.Duration
	// MemBefore and MemAfter are this (the control plane's) process's
	// memory before the devices connected and once they all had: with the
	// embedded server, the server's too.
	MemBefore, MemAfter memory
	// Servers is the number of nats-server processes (0: the embedded
	// server); ServerRSSBefore and ServerRSSAfter their resident memory,
	// summed, at the same moments as MemBefore and MemAfter.
	Servers                         int
	ServerRSSBefore, ServerRSSAfter uint64
	// AgentRSS is the agent processes' resident memory once every device
	// had connected, summed.
	AgentRSS uint64
	// Consumers counts the server's JetStream consumers: before the devices
	// connected, once they had, once they converged, after the floor.
	Consumers [4]int
	// Skipped counts the workload reports and rollout transitions the
	// measurement saw that do not decode for their subject (skipped, and
	// logged as warnings).
	Skipped uint64
	// Flood is the rollout under a flood (Options.Flooders); nil without
	// flooders.
	Flood *FloodResult
}

// RatioStored is Converged / FloorStoredAsync.
func (r Result) RatioStored() float64 {
	if r.FloorStoredAsync <= 0 {
		return 0
	}
	return float64(r.Converged) / float64(r.FloorStoredAsync)
}

// Ratio is Converged / FloorAsync.
func (r Result) Ratio() float64 {
	if r.FloorAsync <= 0 {
		return 0
	}
	return float64(r.Converged) / float64(r.FloorAsync)
}

// PerDevice is the control plane process's growth per connected device:
// RSS and Go heap, bytes (with the embedded server, the server's too).
func (r Result) PerDevice() (rss, heap int64) {
	return (int64(r.MemAfter.RSS) - int64(r.MemBefore.RSS)) / int64(r.N), (int64(r.MemAfter.Heap) - int64(r.MemBefore.Heap)) / int64(r.N)
}

// ServerRSSPerDevice is the nats-server processes' RSS growth per
// connected device, bytes (0 with the embedded server).
func (r Result) ServerRSSPerDevice() int64 {
	return (int64(r.ServerRSSAfter) - int64(r.ServerRSSBefore)) / int64(r.N)
}

// ConsumersGrew reports whether the consumer count grew with the devices.
func (r Result) ConsumersGrew() bool {
	return slices.Max(r.Consumers[1:]) > r.Consumers[0]
}

// Run runs the benchmark for every size and prints the figures to o.Out. It
// fails when a phase does not complete or when the number of JetStream
// consumers grows with the devices; slow figures are printed, never errors.
func Run(ctx context.Context, o Options) ([]Result, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	log := o.Logger
	limit, err := RaiseOpenFileLimit()
	if err != nil {
		return nil, err
	}
	dir := o.DataDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "scalebench-"); err != nil {
			return nil, fmt.Errorf("scalebench: %w", err)
		}
		defer func() { _ = os.RemoveAll(dir) }()
	}
	keys, store := dir+"/keys", dir+"/jetstream"
	for _, d := range []string{keys, store} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("scalebench: %w", err)
		}
	}
	largest := slices.Max(o.Sizes)
	if o.Servers == 0 {
		if need := largest + o.Flooders + 100; uint64(need) > limit {
			return nil, fmt.Errorf("scalebench: %d devices need about %d open files in the server process; the limit is %d: run at most %d, or run a cluster (-servers %d)",
				largest, need, limit, limit-100, (largest+int(limit)-201)/(int(limit)-200))
		}
	} else {
		// Child c connects to server c mod Servers.
		procs := (largest + o.PerProcess - 1) / o.PerProcess
		if need := (procs+o.Servers-1)/o.Servers*o.PerProcess + 100; uint64(need) > limit {
			return nil, fmt.Errorf("scalebench: %d devices in %d agent processes over %d servers need about %d open files in one server; the limit is %d: add servers (-servers) or lower -per-process",
				largest, procs, o.Servers, need, limit)
		}
	}
	cp, err := startControlPlane(ctx, o, store)
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	began := time.Now()
	names := make([]string, 0, largest+o.Flooders)
	for i := 1; i <= largest; i++ {
		names = append(names, DeviceName(i))
	}
	for i := 1; i <= o.Flooders; i++ {
		names = append(names, FlooderName(i))
	}
	var cached []*rsa.PrivateKey
	keySource := "RSA key generated by the development provider"
	if o.KeyCache.Dir != "" {
		distinct := len(names)
		if o.DistinctKeys > 0 && o.DistinctKeys < distinct {
			distinct = o.DistinctKeys
		}
		generated, err := o.KeyCache.Ensure(ctx, log, distinct)
		if err != nil {
			return nil, err
		}
		if generated > 0 {
			fmt.Fprintf(o.Out, "generated %d device keys into the key cache in %s (once: later runs reuse them)\n", generated, time.Since(began).Round(time.Second))
		}
		began = time.Now()
		if cached, err = o.KeyCache.Load(ctx, distinct); err != nil {
			return nil, err
		}
		for i := distinct; i < len(names); i++ {
			cached = append(cached, cached[i%distinct])
		}
		keySource = "cached RSA key's public half uploaded to the development provider"
		if distinct < len(names) {
			keySource += fmt.Sprintf(" (%d distinct keys: device i has key i mod %d)", distinct, distinct)
		}
	}
	if err := cp.enroll(ctx, log, keys, names, cached); err != nil {
		return nil, err
	}
	enrolled := time.Since(began)
	fmt.Fprintf(o.Out, "enrolled %d devices in %s (%.0f/s): machine user + %s, fleet-identity entry, key file\n",
		len(names), enrolled.Round(time.Millisecond), float64(len(names))/enrolled.Seconds(), keySource)
	if o.Flooders > 0 {
		fmt.Fprintf(o.Out, "  of which %d flooding device(s) (%s…), never rollout targets\n", o.Flooders, FlooderName(1))
	}
	log.Info("enrolled", "devices", len(names), "took", enrolled)

	if o.CPUProfile != nil {
		if err := pprof.StartCPUProfile(o.CPUProfile); err != nil {
			return nil, fmt.Errorf("scalebench: CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	b := &bench{o: o, cp: cp, keys: keys, uid: randomToken()}
	var results []Result
	var errs []error
	for _, n := range o.Sizes {
		res, err := b.size(ctx, n)
		results = append(results, res)
		if err == nil {
			printResult(o.Out, res)
			if res.ConsumersGrew() {
				err = fmt.Errorf("%w: %v (before, connected, converged, after the floor)", ErrConsumersGrew, res.Consumers)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("scalebench: %d devices: %w", n, err))
			break
		}
		if err := cp.failure(); err != nil {
			errs = append(errs, err)
			break
		}
	}
	return results, errors.Join(errs...)
}

// bench is the state shared by the sizes of one run.
type bench struct {
	o          Options
	cp         *controlPlane
	keys       string
	uid        string // the benchmark Deployment's UID
	lastSeq    uint64 // last sequence on its intent subject
	generation int64  // of its last revision
}

// Namespace and name of the benchmark's Deployment.
const (
	benchNamespace  = "bench"
	benchDeployment = "scale"
)

// size runs one size: ramp, rollout, the rollout under a flood (with
// flooders), floor.
func (b *bench) size(ctx context.Context, n int) (Result, error) {
	o, cp := b.o, b.cp
	res := Result{N: n}
	var err error
	res.Servers = b.o.Servers
	baseClients, err := cp.servers.clients(ctx)
	if err != nil {
		return res, err
	}
	if res.Consumers[0], err = cp.servers.consumers(ctx); err != nil {
		return res, err
	}
	res.MemBefore, res.ServerRSSBefore = measureMemory(), cp.servers.rss()

	// Ramp: every device connected and its agent running (it reports its
	// inventory after subscribing to its intent).
	inventories := newCounter(n)
	sub, err := cp.monitor.Subscribe("fleet.report.*.inventory", func(m *nats.Msg) {
		if dev := token(m.Subject, 2); dev != "" && deviceIndex(dev) <= n {
			inventories.see(dev)
		}
	})
	if err != nil {
		return res, fmt.Errorf("scalebench: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := cp.monitor.Flush(); err != nil {
		return res, fmt.Errorf("scalebench: %w", err)
	}
	res.RampWindow = time.Duration(float64(n) / o.ConnectRate * float64(time.Second))
	began := time.Now()
	agents, err := b.children(modeAgents, n, res.RampWindow)
	if err != nil {
		return res, err
	}
	res.Children = len(agents)
	defer stopChildren(agents)
	lat, retries, rss, err := awaitReady(ctx, agents, res.RampWindow+o.Timeout)
	if err != nil {
		return res, fmt.Errorf("ramp: %w", err)
	}
	if err := await(ctx, inventories, res.RampWindow+o.Timeout, "agents reporting their inventory"); err != nil {
		return res, fmt.Errorf("ramp: %w", err)
	}
	_, last := inventories.state()
	res.Ramp = last.Sub(began)
	// Flooders publish on their inventory subjects too: stop watching.
	_ = sub.Unsubscribe()
	res.ConnectP50, res.ConnectP99, res.ConnectMax = time.Duration(percentile(lat, 50))*time.Microsecond,
		time.Duration(percentile(lat, 99))*time.Microsecond, time.Duration(percentile(lat, 100))*time.Microsecond
	res.ConnectRetries, res.AgentRSS = retries, rss
	res.MemAfter, res.ServerRSSAfter = measureMemory(), cp.servers.rss()
	if res.Consumers[1], err = cp.servers.consumers(ctx); err != nil {
		return res, err
	}
	o.Logger.Info("devices connected", "devices", n, "ramp", res.Ramp)

	fig, err := b.rollout(ctx, n, &res, nil)
	if err != nil {
		return res, err
	}
	res.Projected, res.Converged, res.Succeeded = fig.projected, fig.converged, fig.succeeded
	if o.Flooders > 0 {
		fr, err := b.flooded(ctx, n, &res)
		res.Flood = fr
		if err != nil {
			return res, fmt.Errorf("flood: %w", err)
		}
	}
	if res.Consumers[2], err = cp.servers.consumers(ctx); err != nil {
		return res, err
	}
	if err := stopChildren(agents); err != nil {
		return res, err
	}
	if err := awaitClients(ctx, cp, baseClients, o.Timeout); err != nil {
		return res, err
	}

	if err := b.floor(ctx, n, &res); err != nil {
		return res, fmt.Errorf("floor: %w", err)
	}
	if err := awaitClients(ctx, cp, baseClients, o.Timeout); err != nil {
		return res, err
	}
	if res.Consumers[3], err = cp.servers.consumers(ctx); err != nil {
		return res, err
	}
	return res, nil
}

// rolloutFigures are what one rollout measured.
type rolloutFigures struct {
	generation                      int64
	projected, converged, succeeded time.Duration
	// convergedAtSucceeded is how many targets had been seen reporting
	// Converged on their own subjects when rollout.succeeded arrived;
	// maxFailed is the largest failed count in the runner's transitions of
	// the revision.
	convergedAtSucceeded, maxFailed int
}

// rollout appends the next revision of the benchmark Deployment targeting
// devices 1..n, as the operator's Deployment controller appends it, and
// measures until the runner projected it, every device converged and the
// runner appended rollout.succeeded. With flood, the flooders start just
// before the append (the caller stops them).
//
// Everything it watches arrives on one channel, in the order the server
// sent it: a target's Converged report is always seen before a
// rollout.succeeded that counted it, so rollout.succeeded arriving before
// every target's own Converged report means the runner counted reports
// that were not theirs (ErrMiscounted). It watches each target's own
// workload subject, never the wildcard a flooder also publishes on.
func (b *bench) rollout(ctx context.Context, n int, res *Result, flood *floodRun) (rolloutFigures, error) {
	cp := b.cp
	b.generation++
	generation := b.generation
	fig := rolloutFigures{generation: generation}
	sc := score.Score{Type: score.TypePodmanV0, Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: benchImage}}}}
	digest, raw, err := operator.ScoreDigest(sc)
	if err != nil {
		return fig, err
	}
	targets := make([]string, n)
	for i := range targets {
		targets[i] = DeviceName(i + 1)
	}
	slices.Sort(targets)
	rev := events.DeploymentRevisionCreated{UID: b.uid, Generation: generation, RevisionID: operator.RevisionID(generation, digest),
		ScoreDigest: digest, Score: raw, Targets: targets, Canaries: []string{}}
	ev, err := events.New(events.Keys{Namespace: benchNamespace, Name: benchDeployment}, rev, events.WithCorrelation(b.uid, generation))
	if err != nil {
		return fig, err
	}

	projected, converged, succeeded := newCounter(n), newCounter(n), newCounter(1)
	skips := events.NewSkipCounter()
	defer func() {
		res.Skipped += skips.Skipped(events.StreamReports, "") + skips.Skipped(events.StreamRollout, "")
	}()
	// A device that reports the revision Failed, a rollout.failed or a
	// control plane component that stops ends the wait at once.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	go func() {
		select {
		case <-cp.failed:
			fail(fmt.Errorf("%w: %w", ErrControlPlane, cp.failure()))
		case <-ctx.Done():
		}
	}()
	rolloutSubject := "fleet.rollout.deployment." + benchNamespace + "." + benchDeployment
	var atSucceeded, maxFailed atomic.Int64
	// ofThisRevision decodes a stored message for its subject (one that
	// does not decode is skipped and counted: device input) and keeps it
	// only when it belongs to the revision being measured.
	ofThisRevision := func(m *nats.Msg) (events.Event, bool) {
		ev, err := events.DecodeStored(m.Subject, m.Data)
		if re, ok := events.AsRecordError(err); ok {
			skips.Skip(ctx, b.o.Logger, re)
			return events.Event{}, false
		}
		if err != nil || ev.Correlation == nil || ev.Correlation.DeploymentUID != b.uid || ev.Correlation.Generation != generation {
			return events.Event{}, false
		}
		return ev, true
	}
	handle := func(m *nats.Msg) {
		switch {
		case strings.HasPrefix(m.Subject, "$KV."):
			if dev := token(m.Subject, 2); deviceIndex(dev) <= n {
				projected.see(dev)
			}
		case m.Subject == rolloutSubject:
			ev, ok := ofThisRevision(m)
			if !ok {
				return
			}
			tr, err := events.Decode[events.RolloutTransition](ev)
			if err != nil {
				return
			}
			if f := int64(tr.Counts.Failed); f > maxFailed.Load() {
				maxFailed.Store(f)
			}
			switch ev.Type {
			case events.TypeRolloutSucceeded:
				got, _ := converged.state()
				atSucceeded.Store(int64(got))
				succeeded.see("succeeded")
			case events.TypeRolloutFailed:
				// A target's own Failed report would have been seen first
				// and ended the wait.
				fail(fmt.Errorf("%w: the runner failed the revision (device %q, %d failed) though no target reported Failed on its own subject",
					ErrMiscounted, tr.Device, tr.Counts.Failed))
			}
		default:
			// A target's workload report. Reports are device input: one
			// that does not decode for its subject is skipped and
			// counted; the device is the subject's.
			ev, ok := ofThisRevision(m)
			if !ok {
				return
			}
			ws, err := events.Decode[events.WorkloadStatus](ev)
			switch {
			case err != nil:
			case ws.Phase == events.WorkloadConverged:
				converged.see(ev.Keys.Device)
			case ws.Phase == events.WorkloadFailed:
				fail(fmt.Errorf("%w: device %s failed the revision: %s", ErrIncomplete, ev.Keys.Device, ws.Error))
			}
		}
	}
	subjects := []string{"$KV." + events.BucketIntent + ".*", rolloutSubject}
	for i := 1; i <= n; i++ {
		subj, err := events.ReportSubject(DeviceName(i), events.ReportWorkload)
		if err != nil {
			return fig, fmt.Errorf("scalebench: %w", err)
		}
		subjects = append(subjects, subj)
	}
	msgs := make(chan *nats.Msg, 4*n+1024)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for _, subj := range subjects {
		s, err := cp.monitor.ChanSubscribe(subj, msgs)
		if err != nil {
			return fig, fmt.Errorf("scalebench: %w", err)
		}
		subs = append(subs, s)
	}
	if err := cp.monitor.Flush(); err != nil {
		return fig, fmt.Errorf("scalebench: %w", err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(done)
	wg.Go(func() {
		for {
			select {
			case m := <-msgs:
				handle(m)
			case <-done:
				return
			}
		}
	})

	if flood != nil {
		if err := flood.start(ctx, floodTarget{Namespace: benchNamespace, Deployment: benchDeployment, UID: b.uid, Generation: generation,
			RevisionID: rev.RevisionID, Targets: n, WorkloadOnly: b.o.FloodWorkloadOnly}, b.o.Timeout); err != nil {
			return fig, err
		}
	}
	began := time.Now()
	pos, err := cp.store.Append(ctx, ev, events.ExpectLastSubjectSequence(b.lastSeq))
	if err != nil {
		return fig, fmt.Errorf("scalebench: append the revision: %w", err)
	}
	b.lastSeq = pos.Sequence
	b.o.Logger.Info("revision appended", "generation", generation, "targets", n, "flood", flood != nil)
	for _, w := range []struct {
		c    *counter
		what string
		into *time.Duration
	}{{projected, "fleet-intent values written by the runner", &fig.projected}, {converged, "devices reporting Converged", &fig.converged},
		{succeeded, "rollout.succeeded", &fig.succeeded}} {
		if err := await(ctx, w.c, b.o.Timeout-time.Since(began), w.what); err != nil {
			return fig, err
		}
		_, last := w.c.state()
		*w.into = last.Sub(began)
	}
	fig.convergedAtSucceeded, fig.maxFailed = int(atSucceeded.Load()), int(maxFailed.Load())
	var lost int
	for _, s := range subs {
		if d, err := s.Dropped(); err == nil {
			lost += d
		}
	}
	switch {
	case lost > 0:
		return fig, fmt.Errorf("scalebench: the measurement's subscriptions dropped %d messages (its channel was full)", lost)
	case fig.convergedAtSucceeded < n:
		return fig, fmt.Errorf("%w: rollout.succeeded arrived when %d of %d targets had reported Converged on their own subjects",
			ErrMiscounted, fig.convergedAtSucceeded, n)
	case fig.maxFailed > 0:
		return fig, fmt.Errorf("%w: a transition showed %d failed targets; none reported Failed on its own subject", ErrMiscounted, fig.maxFailed)
	}
	return fig, nil
}

// floor measures the raw floor: plain subscribers (no product code, floor
// user, no callout) core-subscribed to their own key of a bucket configured
// like fleet-intent; N puts of a value the size of a device's intent; each
// subscriber answers; the time until every answer is seen. Asynchronous
// puts (the floor), then synchronous puts one after the other (as the
// runner writes), then asynchronous puts again.
func (b *bench) floor(ctx context.Context, n int, res *Result) error {
	cp, o := b.cp, b.o
	entry, err := cp.intent.Get(ctx, DeviceName(1))
	if err != nil {
		return fmt.Errorf("scalebench: read a device's intent: %w", err)
	}
	padding := entry.Value()
	window := time.Duration(float64(n) / o.FloorRate * float64(time.Second))
	subs, err := b.children(modeFloor, n, window, envFloorPassword+"="+cp.sec.floorPassword)
	if err != nil {
		return err
	}
	defer stopChildren(subs)
	if _, _, _, err := awaitReady(ctx, subs, window+o.Timeout); err != nil {
		return err
	}
	if err := b.warmFloor(ctx, n, padding); err != nil {
		return err
	}
	var second, storedSecond time.Duration
	rounds := []struct{ core, stored *time.Duration }{
		{&res.FloorAsync, &res.FloorStoredAsync}, {&res.FloorSync, &res.FloorStoredSync}, {&second, &storedSecond},
	}
	for round, into := range rounds {
		tag := fmt.Sprintf("r%d-%s", round, randomToken()[:8])
		value := append([]byte(tag+"|"), padding...)
		w, err := b.watchFloor(n, tag)
		if err != nil {
			return err
		}
		began := time.Now()
		if round == 1 {
			err = b.putSync(ctx, n, value)
		} else {
			err = b.putAsync(ctx, n, value)
		}
		if err == nil {
			err = await(ctx, w.core, o.Timeout, "floor answers")
		}
		if err == nil {
			err = await(ctx, w.stored, o.Timeout, "floor answers to the stored values")
		}
		w.stop()
		if err != nil {
			return err
		}
		_, last := w.core.state()
		*into.core = last.Sub(began)
		_, last = w.stored.state()
		*into.stored = last.Sub(began)
	}
	res.FloorAsyncRounds = [2]time.Duration{res.FloorAsync, second}
	res.FloorAsync = min(res.FloorAsync, second)
	res.FloorStoredAsync = min(res.FloorStoredAsync, storedSecond)
	return stopChildren(subs)
}

// floorWatch counts the floor subscribers' answers of one round: to the
// value as published (core) and to its copy republished once stored.
type floorWatch struct {
	core, stored *counter
	subs         []*nats.Subscription
}

func (w floorWatch) stop() {
	for _, s := range w.subs {
		_ = s.Unsubscribe()
	}
}

// watchFloor subscribes to the answers to the values tagged tag.
func (b *bench) watchFloor(n int, tag string) (floorWatch, error) {
	w := floorWatch{core: newCounter(n), stored: newCounter(n)}
	for prefix, c := range map[string]*counter{floorAckPrefix: w.core, floorStoredAckPrefix: w.stored} {
		s, err := b.cp.monitor.Subscribe(prefix+"*", func(m *nats.Msg) {
			if string(m.Data) == tag {
				c.see(token(m.Subject, 3))
			}
		})
		if err != nil {
			w.stop()
			return w, fmt.Errorf("scalebench: %w", err)
		}
		w.subs = append(w.subs, s)
		if err := s.SetPendingLimits(-1, -1); err != nil {
			w.stop()
			return w, fmt.Errorf("scalebench: %w", err)
		}
	}
	if err := b.cp.monitor.Flush(); err != nil {
		w.stop()
		return w, fmt.Errorf("scalebench: %w", err)
	}
	return w, nil
}

// warmFloor puts an untimed value to every floor subscriber, again to
// those that did not answer both copies within a second, until all did (at
// most Options.Timeout). A subscriber is ready once its own server has its
// subscriptions; on a cluster the other servers learn of them a moment
// later, over the routes, and a value published before that reaches nobody.
func (b *bench) warmFloor(ctx context.Context, n int, padding []byte) error {
	tag := "warm-" + randomToken()[:8]
	value := append([]byte(tag+"|"), padding...)
	w, err := b.watchFloor(n, tag)
	if err != nil {
		return err
	}
	defer w.stop()
	deadline := time.Now().Add(b.o.Timeout)
	missing := make([]int, n)
	for i := range missing {
		missing[i] = i + 1
	}
	for len(missing) > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: floor subscribers answering a value: %d of %d did not after %s", ErrIncomplete, len(missing), n, b.o.Timeout)
		}
		for _, i := range missing {
			if err := b.publishFloor(i, value); err != nil {
				return err
			}
		}
		if err := b.floorPublished(ctx); err != nil {
			return err
		}
		wait := time.NewTimer(time.Second)
		select {
		case <-w.stored.done:
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		}
		wait.Stop()
		missing = missing[:0]
		for i := 1; i <= n; i++ {
			if !w.core.has(DeviceName(i)) || !w.stored.has(DeviceName(i)) {
				missing = append(missing, i)
			}
		}
	}
	return nil
}

func (b *bench) putAsync(ctx context.Context, n int, value []byte) error {
	for i := 1; i <= n; i++ {
		if err := b.publishFloor(i, value); err != nil {
			return err
		}
	}
	return b.floorPublished(ctx)
}

// publishFloor puts value to device i's floor key asynchronously.
func (b *bench) publishFloor(i int, value []byte) error {
	if _, err := b.cp.floorJS.PublishAsync("$KV."+floorBucket+"."+DeviceName(i), value, jetstream.WithStallWait(5*time.Second)); err != nil {
		return fmt.Errorf("scalebench: floor put: %w", err)
	}
	return nil
}

// floorPublished waits until every asynchronous floor put was acknowledged.
func (b *bench) floorPublished(ctx context.Context) error {
	select {
	case <-b.cp.floorJS.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *bench) putSync(ctx context.Context, n int, value []byte) error {
	for i := 1; i <= n; i++ {
		if _, err := b.cp.floorKV.Put(ctx, DeviceName(i), value); err != nil {
			return fmt.Errorf("scalebench: floor put: %w", err)
		}
	}
	return nil
}

// children starts the child processes of one phase for devices 1..n.
func (b *bench) children(mode string, n int, window time.Duration, env ...string) ([]*child, error) {
	per := b.o.PerProcess
	count := (n + per - 1) / per
	var out []*child
	for c := range count {
		from, to := c*n/count+1, (c+1)*n/count
		f := childFlags{url: b.cp.servers.urlFor(c), from: from, to: to, window: window}
		if mode == modeAgents || mode == modeFlood {
			f.keys = b.keys
		}
		ch, err := startChild(b.o, mode, f, env...)
		if err != nil {
			stopChildren(out)
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// stopChildren stops every child (once; later calls do nothing).
func stopChildren(cs []*child) error {
	var errs []error
	for _, c := range cs {
		if c.stopped {
			continue
		}
		c.stopped = true
		if err := c.stop(time.Minute); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// awaitReady waits for every child's ready line and returns the sorted
// connect latencies (µs), the retries and the children's summed RSS.
func awaitReady(ctx context.Context, cs []*child, timeout time.Duration) ([]int64, int, uint64, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var lat []int64
	retries := 0
	var rss uint64
	for _, c := range cs {
		for ready := false; !ready; {
			select {
			case m, ok := <-c.msgs:
				switch {
				case !ok:
					return nil, 0, 0, fmt.Errorf("%w: pid %d exited before all its devices connected", ErrChild, c.cmd.Process.Pid)
				case m.Kind == "error":
					return nil, 0, 0, fmt.Errorf("%w: %s", ErrChild, m.Error)
				case m.Kind == "ready":
					lat = append(lat, m.Latencies...)
					retries += m.Retries
					rss += m.RSS
					ready = true
				}
			case <-deadline.C:
				return nil, 0, 0, fmt.Errorf("%w: devices not connected after %s", ErrIncomplete, timeout)
			case <-ctx.Done():
				return nil, 0, 0, ctx.Err()
			}
		}
	}
	slices.Sort(lat)
	return lat, retries, rss, nil
}

// await waits until c reached its target.
func await(ctx context.Context, c *counter, timeout time.Duration, what string) error {
	t := time.NewTimer(max(timeout, time.Second))
	defer t.Stop()
	select {
	case <-c.done:
		return nil
	case <-t.C:
		got, _ := c.state()
		return fmt.Errorf("%w: %s: %d of %d after %s", ErrIncomplete, what, got, c.target, timeout.Round(time.Second))
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// awaitClients polls until the server is back to base client connections.
func awaitClients(ctx context.Context, cp *controlPlane, base int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		n, err := cp.servers.clients(ctx)
		if err != nil {
			return err
		}
		if n <= base {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d client connections left after the children stopped (want %d)", ErrIncomplete, n, base)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// token returns the i-th dot-separated token of subject ("" when absent).
func token(subject string, i int) string {
	parts := strings.Split(subject, ".")
	if i < len(parts) {
		return parts[i]
	}
	return ""
}

// deviceIndex is i for DeviceName(i), a huge number for anything else.
func deviceIndex(dev string) int {
	s, ok := strings.CutPrefix(dev, "sim-")
	if !ok {
		return int(^uint(0) >> 1)
	}
	i := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			return int(^uint(0) >> 1)
		}
		i = i*10 + int(r-'0')
	}
	return i
}

// printResult prints one size's figures and the goals.
func printResult(w io.Writer, r Result) {
	rss, heap := r.PerDevice()
	where := "the embedded server"
	if r.Servers > 0 {
		where = fmt.Sprintf("a cluster of %d nats-server processes", r.Servers)
	}
	fmt.Fprintf(w, "\nN=%d devices (%d agent process(es), %s)\n", r.N, r.Children, where)
	fmt.Fprintf(w, "  ramp        %8s  (connects spread over %s; connect p50 %s, p99 %s, max %s; %d retried attempts)\n",
		r.Ramp.Round(time.Millisecond), r.RampWindow.Round(time.Millisecond), r.ConnectP50.Round(time.Millisecond),
		r.ConnectP99.Round(time.Millisecond), r.ConnectMax.Round(time.Millisecond), r.ConnectRetries)
	fmt.Fprintf(w, "  projected   %8s  (revision appended → runner wrote every device's fleet-intent value)\n", r.Projected.Round(time.Millisecond))
	fmt.Fprintf(w, "  converged   %8s  (revision appended → every device reported Converged)\n", r.Converged.Round(time.Millisecond))
	fmt.Fprintf(w, "  succeeded   %8s  (revision appended → runner appended rollout.succeeded)\n", r.Succeeded.Round(time.Millisecond))
	fmt.Fprintf(w, "  floor       %8s  (N async KV puts → N plain subscribers answered; better of %s and %s); sync puts %s\n",
		r.FloorAsync.Round(time.Millisecond), r.FloorAsyncRounds[0].Round(time.Millisecond), r.FloorAsyncRounds[1].Round(time.Millisecond),
		r.FloorSync.Round(time.Millisecond))
	fmt.Fprintf(w, "  stored floor %7s  (the same puts → N subscribers answered each value's copy republished once stored; better of two async rounds); sync puts %s\n",
		r.FloorStoredAsync.Round(time.Millisecond), r.FloorStoredSync.Round(time.Millisecond))
	fmt.Fprintf(w, "  ratio       %8.1f× converged / floor, %.1f× converged / stored floor\n", r.Ratio(), r.RatioStored())
	fmt.Fprintf(w, "  goal        N=%d converged within %.0f× the raw floor: %.1f× (%s against %s): %s\n",
		r.N, GoalFloorFactor, r.Ratio(), r.Converged.Round(time.Millisecond), r.FloorAsync.Round(time.Millisecond), met(r.Ratio() <= GoalFloorFactor))
	fmt.Fprintf(w, "  goal        N=%d converged within %.0f× the stored floor: %.1f× (%s against %s): %s\n",
		r.N, GoalFloorFactor, r.RatioStored(), r.Converged.Round(time.Millisecond), r.FloorStoredAsync.Round(time.Millisecond), met(r.RatioStored() <= GoalFloorFactor))
	switch {
	case r.N >= 100000:
		fmt.Fprintf(w, "  goal        N=%d converged ≤ %s: %s: %s\n", r.N, GoalConverged100k, r.Converged.Round(time.Millisecond), met(r.Converged <= GoalConverged100k))
	case r.N >= 10000:
		fmt.Fprintf(w, "  goal        N=%d converged ≤ %s: %s: %s\n", r.N, GoalConverged, r.Converged.Round(time.Millisecond), met(r.Converged <= GoalConverged))
	}
	if r.Servers == 0 {
		fmt.Fprintf(w, "  memory      %.1f KB RSS, %.1f KB Go heap per connected device in the server process (RSS %d → %d MB, heap %d → %d MB)\n",
			float64(rss)/1024, float64(heap)/1024, r.MemBefore.RSS>>20, r.MemAfter.RSS>>20, r.MemBefore.Heap>>20, r.MemAfter.Heap>>20)
	} else {
		fmt.Fprintf(w, "  memory      %.1f KB RSS per connected device in the nats-server processes (RSS %d → %d MB summed)\n",
			float64(r.ServerRSSPerDevice())/1024, r.ServerRSSBefore>>20, r.ServerRSSAfter>>20)
		fmt.Fprintf(w, "              %.1f KB RSS, %.1f KB Go heap per device in the control plane process: callout, provider, runner (RSS %d → %d MB, heap %d → %d MB)\n",
			float64(rss)/1024, float64(heap)/1024, r.MemBefore.RSS>>20, r.MemAfter.RSS>>20, r.MemBefore.Heap>>20, r.MemAfter.Heap>>20)
	}
	fmt.Fprintf(w, "  agents      %.1f KB RSS per device in the agent processes (%d MB in all: agent daemon, simulated runtime, client connection)\n",
		float64(r.AgentRSS)/1024/float64(r.N), r.AgentRSS>>20)
	fmt.Fprintf(w, "  consumers   %d before, %d connected, %d converged, %d after the floor\n",
		r.Consumers[0], r.Consumers[1], r.Consumers[2], r.Consumers[3])
	fmt.Fprintf(w, "  goal        N=%d JetStream consumer count does not grow with the devices: %v: %s\n", r.N, r.Consumers, met(!r.ConsumersGrew()))
	if r.Flood != nil {
		printFlood(w, r)
	}
}

// printFlood prints the rollout under a flood against the rollout without.
func printFlood(w io.Writer, r Result) {
	f := r.Flood
	tot, rep, tel := f.Total(), f.Stream(events.StreamReports), f.Stream(events.StreamTelemetry)
	secs := max(f.Duration.Seconds(), 1e-9)
	mb := func(b uint64) float64 { return float64(b) / 1e6 }
	what := "all of their report subjects"
	if f.WorkloadOnly {
		what = "their workload subjects, small reports only"
	}
	fmt.Fprintf(w, "  flood       %d flooding device(s), not targets, publishing on %s for %s (revision appended → rollout.succeeded)\n",
		f.Flooders, what, f.Duration.Round(time.Millisecond))
	fmt.Fprintf(w, "    converged   %8s  under the flood (%s without); projected %s (%s); succeeded %s (%s)\n",
		f.Converged.Round(time.Millisecond), r.Converged.Round(time.Millisecond), f.Projected.Round(time.Millisecond),
		r.Projected.Round(time.Millisecond), f.Succeeded.Round(time.Millisecond), r.Succeeded.Round(time.Millisecond))
	fmt.Fprintf(w, "    published   %d messages (%.0f/s), %.1f MB (%.1f MB/s), never answered (the report streams do not acknowledge); %d publish errors, %d disconnects\n",
		tot.Published, float64(tot.Published)/secs, mb(tot.PublishedBytes), mb(tot.PublishedBytes)/secs, f.PublishErrors, f.Disconnects)
	for _, k := range floodKinds {
		t := f.ByKind[string(k)]
		fmt.Fprintf(w, "      %-10s %8d published (%7.1f MB)\n", k, t.Published, mb(t.PublishedBytes))
	}
	fmt.Fprintf(w, "    %-13s took %d messages over the flood (the flooders published %d there, %.1f MB payload; the targets' own reports and the sentinels are the rest); %d of the flooders' held after it; the stream grew %.1f MB in all\n",
		events.StreamReports, f.IngestedReports, rep.Published, mb(rep.PublishedBytes), f.InReports, mb(f.ReportsGrowth))
	fmt.Fprintf(w, "    %-13s took %d messages over the flood (%d published by the flooders); %d of the flooders' kept after it (the last few per subject)\n",
		events.StreamTelemetry, f.IngestedTelemetry, tel.Published, f.InTelemetry)
	fmt.Fprintf(w, "    runner      skipped %d undecodable records; largest backlog %d workload reports; read past the flood %s after it was flushed; succeeded − converged %s (%s without)\n",
		f.RunnerSkipped, f.RunnerMaxBacklog, f.Drain.Round(time.Millisecond), (f.Succeeded - f.Converged).Round(time.Millisecond),
		(r.Succeeded - r.Converged).Round(time.Millisecond))
	fmt.Fprintf(w, "    memory      control plane process RSS %d MB before the flood, at most %d MB until it was drained\n", f.RSSBefore>>20, f.PeakRSS>>20)
	fmt.Fprintf(w, "    forgeries   %d of %d targets had reported Converged themselves when rollout.succeeded arrived; most failed and degraded targets the runner showed: %d and %d (must be %d, 0 and 0: %s)\n",
		f.ConvergedAtSucceeded, r.N, f.RunnerMaxFailed, f.RunnerMaxDegraded, r.N, met(f.ConvergedAtSucceeded == r.N && f.RunnerMaxFailed == 0 && f.RunnerMaxDegraded == 0))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

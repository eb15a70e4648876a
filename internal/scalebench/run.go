package scalebench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
	"github.com/nationtech/harmony-fleet/operator"
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
)

// Goals the figures are printed against (never asserted).
const (
	GoalConverged   = 10 * time.Second // for 10,000 devices
	GoalFloorFactor = 3.0
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
	// MemBefore and MemAfter are the server process's memory before the
	// devices connected and once they all had.
	MemBefore, MemAfter memory
	// AgentRSS is the agent processes' resident memory once every device
	// had connected, summed.
	AgentRSS uint64
	// Consumers counts the server's JetStream consumers: before the devices
	// connected, once they had, once they converged, after the floor.
	Consumers [4]int
}

// Ratio is Converged / FloorAsync.
func (r Result) Ratio() float64 {
	if r.FloorAsync <= 0 {
		return 0
	}
	return float64(r.Converged) / float64(r.FloorAsync)
}

// PerDevice is the server process's growth per connected device: RSS and
// Go heap, bytes.
func (r Result) PerDevice() (rss, heap int64) {
	return (int64(r.MemAfter.RSS) - int64(r.MemBefore.RSS)) / int64(r.N), (int64(r.MemAfter.Heap) - int64(r.MemBefore.Heap)) / int64(r.N)
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
	if need := largest + 100; uint64(need) > limit {
		return nil, fmt.Errorf("scalebench: %d devices need about %d open files in the server process; the limit is %d: run at most %d (a cluster of servers is not implemented)",
			largest, need, limit, limit-100)
	}
	cp, err := startControlPlane(ctx, o, store)
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	began := time.Now()
	if err := cp.enroll(ctx, log, keys, 0, largest); err != nil {
		return nil, err
	}
	enrolled := time.Since(began)
	fmt.Fprintf(o.Out, "enrolled %d devices in %s (%.0f/s): machine user + RSA key at the development provider, fleet-identity entry, key file\n",
		largest, enrolled.Round(time.Millisecond), float64(largest)/enrolled.Seconds())
	log.Info("enrolled", "devices", largest, "took", enrolled)

	if o.CPUProfile != nil {
		if err := pprof.StartCPUProfile(o.CPUProfile); err != nil {
			return nil, fmt.Errorf("scalebench: CPU profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	b := &bench{o: o, cp: cp, keys: keys, uid: randomToken()}
	var results []Result
	var errs []error
	for i, n := range o.Sizes {
		res, err := b.size(ctx, n, int64(i+1))
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
	o       Options
	cp      *controlPlane
	keys    string
	uid     string // the benchmark Deployment's UID
	lastSeq uint64 // last sequence on its intent subject
}

// Namespace and name of the benchmark's Deployment.
const (
	benchNamespace  = "bench"
	benchDeployment = "scale"
)

// size runs one size: ramp, rollout, floor.
func (b *bench) size(ctx context.Context, n int, generation int64) (Result, error) {
	o, cp := b.o, b.cp
	res := Result{N: n}
	var err error
	baseClients := cp.srv.NATS().NumClients()
	if res.Consumers[0], err = consumers(cp.srv.NATS()); err != nil {
		return res, err
	}
	res.MemBefore = measureMemory()

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
	res.ConnectP50, res.ConnectP99, res.ConnectMax = time.Duration(percentile(lat, 50))*time.Microsecond,
		time.Duration(percentile(lat, 99))*time.Microsecond, time.Duration(percentile(lat, 100))*time.Microsecond
	res.ConnectRetries, res.AgentRSS = retries, rss
	res.MemAfter = measureMemory()
	if res.Consumers[1], err = consumers(cp.srv.NATS()); err != nil {
		return res, err
	}
	o.Logger.Info("devices connected", "devices", n, "ramp", res.Ramp)

	if err := b.rollout(ctx, n, generation, &res); err != nil {
		return res, err
	}
	if res.Consumers[2], err = consumers(cp.srv.NATS()); err != nil {
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
	if res.Consumers[3], err = consumers(cp.srv.NATS()); err != nil {
		return res, err
	}
	return res, nil
}

// rollout appends a revision of the benchmark Deployment targeting devices
// 1..n, as the operator's Deployment controller appends it, and measures
// until the runner projected it, every device converged and the runner
// appended rollout.succeeded.
func (b *bench) rollout(ctx context.Context, n int, generation int64, res *Result) error {
	cp := b.cp
	score := fleetv1.Score{Type: fleetv1.ScorePodmanV0, Data: fleetv1.PodmanV0{Services: []fleetv1.PodmanService{{Name: "api", Image: benchImage}}}}
	digest, raw, err := operator.ScoreDigest(score)
	if err != nil {
		return err
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
		return err
	}

	projected, converged, succeeded := newCounter(n), newCounter(n), newCounter(1)
	// A device that reports the revision Failed ends the wait at once.
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var subs []*nats.Subscription
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	for subj, fn := range map[string]nats.MsgHandler{
		"$KV." + events.BucketIntent + ".*": func(m *nats.Msg) {
			if dev := token(m.Subject, 2); deviceIndex(dev) <= n {
				projected.see(dev)
			}
		},
		"fleet.report.*.workload": func(m *nats.Msg) {
			ev, err := events.Unmarshal(m.Data)
			if err != nil || ev.Correlation == nil || ev.Correlation.DeploymentUID != b.uid || ev.Correlation.Generation != generation {
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
		},
		"fleet.rollout.deployment." + benchNamespace + "." + benchDeployment: func(m *nats.Msg) {
			ev, err := events.Unmarshal(m.Data)
			if err == nil && ev.Type == events.TypeRolloutSucceeded && ev.Correlation != nil && ev.Correlation.Generation == generation {
				succeeded.see("succeeded")
			}
		},
	} {
		s, err := cp.monitor.Subscribe(subj, fn)
		if err != nil {
			return fmt.Errorf("scalebench: %w", err)
		}
		if err := s.SetPendingLimits(-1, -1); err != nil {
			return fmt.Errorf("scalebench: %w", err)
		}
		subs = append(subs, s)
	}
	if err := cp.monitor.Flush(); err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}

	began := time.Now()
	pos, err := cp.store.Append(ctx, ev, events.ExpectLastSubjectSequence(b.lastSeq))
	if err != nil {
		return fmt.Errorf("scalebench: append the revision: %w", err)
	}
	b.lastSeq = pos.Sequence
	b.o.Logger.Info("revision appended", "generation", generation, "targets", n)
	for _, w := range []struct {
		c    *counter
		what string
		into *time.Duration
	}{{projected, "fleet-intent values written by the runner", &res.Projected}, {converged, "devices reporting Converged", &res.Converged},
		{succeeded, "rollout.succeeded", &res.Succeeded}} {
		if err := await(ctx, w.c, b.o.Timeout-time.Since(began), w.what); err != nil {
			return err
		}
		_, last := w.c.state()
		*w.into = last.Sub(began)
	}
	return nil
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
	var second time.Duration
	for round, into := range []*time.Duration{&res.FloorAsync, &res.FloorSync, &second} {
		tag := fmt.Sprintf("r%d-%s", round, randomToken()[:8])
		value := append([]byte(tag+"|"), padding...)
		acks := newCounter(n)
		s, err := cp.monitor.Subscribe(floorAckPrefix+"*", func(m *nats.Msg) {
			if string(m.Data) == tag {
				acks.see(m.Subject)
			}
		})
		if err != nil {
			return fmt.Errorf("scalebench: %w", err)
		}
		if err := s.SetPendingLimits(-1, -1); err != nil {
			return fmt.Errorf("scalebench: %w", err)
		}
		if err := cp.monitor.Flush(); err != nil {
			return fmt.Errorf("scalebench: %w", err)
		}
		began := time.Now()
		if round == 1 {
			err = b.putSync(ctx, n, value)
		} else {
			err = b.putAsync(ctx, n, value)
		}
		if err == nil {
			err = await(ctx, acks, o.Timeout, "floor answers")
		}
		_ = s.Unsubscribe()
		if err != nil {
			return err
		}
		_, last := acks.state()
		*into = last.Sub(began)
	}
	res.FloorAsyncRounds = [2]time.Duration{res.FloorAsync, second}
	res.FloorAsync = min(res.FloorAsync, second)
	return stopChildren(subs)
}

func (b *bench) putAsync(ctx context.Context, n int, value []byte) error {
	js := b.cp.floorJS
	for i := 1; i <= n; i++ {
		if _, err := js.PublishAsync("$KV."+floorBucket+"."+DeviceName(i), value, jetstream.WithStallWait(5*time.Second)); err != nil {
			return fmt.Errorf("scalebench: floor put: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
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
		f := childFlags{url: b.cp.srv.ClientURL(), from: from, to: to, window: window}
		if mode == modeAgents {
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
	for cp.srv.NATS().NumClients() > base {
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d client connections left after the children stopped (want %d)", ErrIncomplete, cp.srv.NATS().NumClients(), base)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
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
	fmt.Fprintf(w, "\nN=%d devices (%d agent process(es))\n", r.N, r.Children)
	fmt.Fprintf(w, "  ramp        %8s  (connects spread over %s; connect p50 %s, p99 %s, max %s; %d retried attempts)\n",
		r.Ramp.Round(time.Millisecond), r.RampWindow.Round(time.Millisecond), r.ConnectP50.Round(time.Millisecond),
		r.ConnectP99.Round(time.Millisecond), r.ConnectMax.Round(time.Millisecond), r.ConnectRetries)
	fmt.Fprintf(w, "  projected   %8s  (revision appended → runner wrote every device's fleet-intent value)\n", r.Projected.Round(time.Millisecond))
	fmt.Fprintf(w, "  converged   %8s  (revision appended → every device reported Converged)\n", r.Converged.Round(time.Millisecond))
	fmt.Fprintf(w, "  succeeded   %8s  (revision appended → runner appended rollout.succeeded)\n", r.Succeeded.Round(time.Millisecond))
	fmt.Fprintf(w, "  floor       %8s  (N async KV puts → N plain subscribers answered; better of %s and %s); sync puts %s\n",
		r.FloorAsync.Round(time.Millisecond), r.FloorAsyncRounds[0].Round(time.Millisecond), r.FloorAsyncRounds[1].Round(time.Millisecond),
		r.FloorSync.Round(time.Millisecond))
	fmt.Fprintf(w, "  ratio       %8.1f× converged / floor (goal ≤ %.0f×: %s)\n", r.Ratio(), GoalFloorFactor, met(r.Ratio() <= GoalFloorFactor))
	if r.N >= 10000 {
		fmt.Fprintf(w, "  goal        converged ≤ %s at 10,000 devices: %s\n", GoalConverged, met(r.Converged <= GoalConverged))
	}
	fmt.Fprintf(w, "  memory      %.1f KB RSS, %.1f KB Go heap per connected device in the server process (RSS %d → %d MB, heap %d → %d MB)\n",
		float64(rss)/1024, float64(heap)/1024, r.MemBefore.RSS>>20, r.MemAfter.RSS>>20, r.MemBefore.Heap>>20, r.MemAfter.Heap>>20)
	fmt.Fprintf(w, "  agents      %.1f KB RSS per device in the agent processes (%d MB in all: agent daemon, simulated runtime, client connection)\n",
		float64(r.AgentRSS)/1024/float64(r.N), r.AgentRSS>>20)
	fmt.Fprintf(w, "  consumers   %d before, %d connected, %d converged, %d after the floor (must not grow: %s)\n",
		r.Consumers[0], r.Consumers[1], r.Consumers[2], r.Consumers[3], met(!r.ConsumersGrew()))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

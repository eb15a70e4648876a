package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/identity/credential"
)

// Child modes (the argument after "child").
const (
	modeAgents = "agents"
	modeFloor  = "floor"
	modeFlood  = "flood"
)

// EnvChildCPUProfile, when set in the parent's environment (fleet-scale
// -child-cpuprofile), names a folder where every child process writes its
// CPU profile: child-<mode>-<from>-<to>.pprof, from its start until it
// stops. The children inherit it.
const EnvChildCPUProfile = "SCALEBENCH_CHILD_CPUPROFILE"

// EnvChildMemProfile, when set in the parent's environment (fleet-scale
// -memprofile), names a folder where every agent child process writes its
// heap profile once all its devices are connected (after a forced garbage
// collection), child-agents-<from>-<to>.heap.pprof, and its goroutines
// grouped by stack, child-agents-<from>-<to>.goroutines.txt.
const EnvChildMemProfile = "SCALEBENCH_CHILD_MEMPROFILE"

// envFloorPassword passes the floor user's password to floor children (never
// on a command line).
const envFloorPassword = "SCALEBENCH_FLOOR_PASSWORD"

// benchImage is the image of the benchmark's revision; every simulated
// device has it locally.
const benchImage = "registry.example.com/scalebench/api:v1"

// childMsg is one line a child writes on its standard output.
type childMsg struct {
	// Kind is "ready" (every device of the child is connected and
	// subscribed), "flooded" (a flood child's traffic once it stopped) or
	// "error".
	Kind      string `json:"kind"`
	Connected int    `json:"connected,omitempty"`
	// Retries counts failed connect attempts that were retried.
	Retries int `json:"retries,omitempty"`
	// Latencies are the devices' connect times (from the first attempt,
	// credential and callout included), in microseconds.
	Latencies []int64 `json:"latencies,omitempty"`
	RSS       uint64  `json:"rss,omitempty"`
	// Heap and Stacks are the child's Go heap in use and goroutine stacks
	// in use right after RSS was read, after a forced garbage collection;
	// Goroutines its goroutine count.
	Heap       uint64 `json:"heap,omitempty"`
	Stacks     uint64 `json:"stacks,omitempty"`
	Goroutines int    `json:"goroutines,omitempty"`
	Error      string `json:"error,omitempty"`
	// Flood is a flood child's traffic (kind "flooded").
	Flood *floodReport `json:"flood,omitempty"`
}

// RaiseOpenFileLimit raises the soft RLIMIT_NOFILE to the hard limit and
// returns the new soft limit.
func RaiseOpenFileLimit() (uint64, error) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0, fmt.Errorf("scalebench: read RLIMIT_NOFILE: %w", err)
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
			return 0, fmt.Errorf("scalebench: raise RLIMIT_NOFILE to %d: %w", l.Max, err)
		}
	}
	return l.Cur, nil
}

// childFlags are a child's parameters.
type childFlags struct {
	url      string
	keys     string
	from, to int
	window   time.Duration
}

// RunChild runs one child process's devices until stdin is closed or ctx
// ends: args are what follows "child" on the command line (the mode, then
// flags). Mode "agents" runs the real agent daemon for each device with its
// key file; mode "floor" runs plain core-NATS subscribers; mode "flood"
// connects flooding devices with their key files, which flood their own
// report subjects between a start and a stop line read on stdin. It writes
// JSON lines to stdout (a "ready" line once every device is connected) and
// logs to log.
func RunChild(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer, log *slog.Logger) error {
	if len(args) == 0 || (args[0] != modeAgents && args[0] != modeFloor && args[0] != modeFlood) {
		return fmt.Errorf("scalebench child: want mode %s, %s or %s, got %q", modeAgents, modeFloor, modeFlood, args)
	}
	mode := args[0]
	fs := flag.NewFlagSet("child "+mode, flag.ContinueOnError)
	var f childFlags
	fs.StringVar(&f.url, "url", "", "NATS URL")
	fs.StringVar(&f.keys, "keys", "", "folder of the device key files (agents)")
	fs.IntVar(&f.from, "from", 1, "first device number")
	fs.IntVar(&f.to, "to", 0, "last device number")
	fs.DurationVar(&f.window, "window", 0, "connects are spread uniformly over this window")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if f.url == "" || f.to < f.from {
		return fmt.Errorf("scalebench child: -url and -from ≤ -to are required")
	}
	if _, err := RaiseOpenFileLimit(); err != nil {
		return err
	}
	if dir := os.Getenv(EnvChildCPUProfile); dir != "" {
		stop, err := startChildProfile(dir, mode, f)
		if err != nil {
			return err
		}
		defer stop()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmds := make(chan floodCmd, 4)
	go func() {
		// The parent closes stdin to stop us; a flood child also reads its
		// start and stop lines from it.
		sc := bufio.NewScanner(stdin)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var c floodCmd
			if mode != modeFlood || json.Unmarshal(sc.Bytes(), &c) != nil {
				continue
			}
			select {
			case cmds <- c:
			case <-ctx.Done():
			}
		}
		cancel()
	}()
	var outMu sync.Mutex
	enc := json.NewEncoder(stdout)
	emit := func(m childMsg) {
		outMu.Lock()
		defer outMu.Unlock()
		_ = enc.Encode(m)
	}
	switch mode {
	case modeAgents:
		return runAgents(ctx, f, emit, log)
	case modeFlood:
		return runFlooders(ctx, f, cmds, emit, log)
	}
	pw := os.Getenv(envFloorPassword)
	if pw == "" {
		return fmt.Errorf("scalebench child: %s is not set", envFloorPassword)
	}
	return runFloorSubscribers(ctx, f, pw, emit, log)
}

// startChildProfile starts the CPU profile of this child process in dir;
// stop ends it and closes the file.
func startChildProfile(dir, mode string, f childFlags) (stop func(), err error) {
	path := filepath.Join(dir, fmt.Sprintf("child-%s-%d-%d.pprof", mode, f.from, f.to))
	out, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("scalebench child: CPU profile (%s): %w", EnvChildCPUProfile, err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		_ = out.Close()
		return nil, fmt.Errorf("scalebench child: start the CPU profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = out.Close()
	}, nil
}

// ramp collects connect results of one child's devices.
type ramp struct {
	mu        sync.Mutex
	latencies []int64
	retries   atomic.Int64
	connected sync.WaitGroup
	// heapProfile, when set, is the file the child's heap profile is
	// written to once every device connected.
	heapProfile string
}

func (r *ramp) done(d time.Duration) {
	r.mu.Lock()
	r.latencies = append(r.latencies, d.Microseconds())
	r.mu.Unlock()
	r.connected.Done()
}

// report waits until every device connected (or ctx ends) and emits the
// ready line.
func (r *ramp) report(ctx context.Context, emit func(childMsg)) {
	ok := make(chan struct{})
	go func() { r.connected.Wait(); close(ok) }()
	select {
	case <-ok:
	case <-ctx.Done():
		return
	}
	r.mu.Lock()
	lat := slices.Clone(r.latencies)
	r.mu.Unlock()
	rss := processRSS() // as the process holds it, before the forced collection
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if r.heapProfile != "" {
		if err := writeHeapProfile(r.heapProfile); err != nil {
			emit(childMsg{Kind: "error", Error: err.Error()})
			return
		}
	}
	emit(childMsg{Kind: "ready", Connected: len(lat), Retries: int(r.retries.Load()), Latencies: lat, RSS: rss,
		Heap: ms.HeapInuse, Stacks: ms.StackInuse, Goroutines: runtime.NumGoroutine()})
}

// writeHeapProfile writes this process's heap profile to path.
func writeHeapProfile(path string) error {
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("scalebench child: heap profile (%s): %w", EnvChildMemProfile, err)
	}
	if err := pprof.Lookup("heap").WriteTo(out, 0); err != nil {
		_ = out.Close()
		return fmt.Errorf("scalebench child: heap profile %s: %w", path, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("scalebench child: heap profile %s: %w", path, err)
	}
	// The goroutines beside it, grouped by stack (text): what each device
	// keeps running.
	gpath := strings.TrimSuffix(path, ".heap.pprof") + ".goroutines.txt"
	g, err := os.Create(gpath)
	if err != nil {
		return fmt.Errorf("scalebench child: goroutine profile (%s): %w", EnvChildMemProfile, err)
	}
	if err := pprof.Lookup("goroutine").WriteTo(g, 1); err != nil {
		_ = g.Close()
		return fmt.Errorf("scalebench child: goroutine profile %s: %w", gpath, err)
	}
	if err := g.Close(); err != nil {
		return fmt.Errorf("scalebench child: goroutine profile %s: %w", gpath, err)
	}
	return nil
}

// delay waits a uniformly random part of window; false when ctx ended.
func delay(ctx context.Context, window time.Duration) bool {
	if window <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(rand.N(window))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// retryPause waits 1–6 s (jittered, like the agent's reconnect jitter)
// before another connect attempt, so that retries do not pile onto an
// overloaded callout; false when ctx ended.
func retryPause(ctx context.Context) bool {
	t := time.NewTimer(time.Second + rand.N(5*time.Second))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// runAgents runs the real agent daemon for devices f.from..f.to, each with
// its key file, its own id_token and its own callout-authenticated
// connection, on its own simulated runtime.
func runAgents(ctx context.Context, f childFlags, emit func(childMsg), log *slog.Logger) error {
	// One HTTP client for the token grants of every device of this child,
	// so idle connections to the provider are shared, not one per device.
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}}
	var (
		r  ramp
		wg sync.WaitGroup
	)
	if dir := os.Getenv(EnvChildMemProfile); dir != "" {
		r.heapProfile = filepath.Join(dir, fmt.Sprintf("child-%s-%d-%d.heap.pprof", modeAgents, f.from, f.to))
	}
	r.connected.Add(f.to - f.from + 1)
	for i := f.from; i <= f.to; i++ {
		wg.Go(func() {
			if err := runAgent(ctx, f, i, hc, &r, log); err != nil && ctx.Err() == nil {
				log.Error("device stopped", "device", DeviceName(i), "error", err)
				emit(childMsg{Kind: "error", Error: fmt.Sprintf("%s: %v", DeviceName(i), err)})
			}
		})
	}
	r.report(ctx, emit)
	<-ctx.Done()
	wg.Wait()
	return nil
}

func runAgent(ctx context.Context, f childFlags, i int, hc *http.Client, r *ramp, log *slog.Logger) error {
	dev := DeviceName(i)
	if !delay(ctx, f.window) {
		return nil
	}
	nc, took, err := connectDevice(ctx, f, dev, hc, r, log)
	if nc == nil {
		return err
	}
	defer nc.Close()
	r.done(took)
	dlog := log.With("device", dev)
	return agent.Run(ctx, agent.Options{
		Device: dev, Conn: nc, Labels: map[string]string{"role": "scalebench"}, AgentVersion: "scalebench",
		Reconciler: &agent.Reconciler{Runtime: sim.New(sim.Options{LocalImages: []string{benchImage}}), Log: dlog},
		Logger:     dlog,
	})
}

// connectDevice connects device dev as its agent does: its key file, its
// own id_token from the provider, the auth callout. Failed attempts are
// counted on r and retried after a jittered pause. It returns the
// connection and how long connecting took, or a nil connection when ctx
// ended first.
func connectDevice(ctx context.Context, f childFlags, dev string, hc *http.Client, r *ramp, log *slog.Logger, opts ...nats.Option) (*nats.Conn, time.Duration, error) {
	began := time.Now()
	key, err := credential.ReadKeyFile(keyFile(f.keys, dev))
	if err != nil {
		return nil, 0, err
	}
	// The token source is made once (discovery) and keeps its id_token, so
	// a retried connect costs the callout again, not the provider.
	var src *credential.Source
	for {
		src, err = credential.New(ctx, credential.Options{Issuer: key.Issuer, Key: key, Audience: key.Audience, HTTPClient: hc, Logger: log})
		if err == nil {
			break
		}
		r.retries.Add(1)
		log.Debug("token source failed; retrying", "device", dev, "error", err)
		if !retryPause(ctx) {
			return nil, 0, nil
		}
	}
	var dc *agent.DeviceConn
	for {
		dc, err = agent.Connect(ctx, agent.ConnectOptions{URL: f.url, Device: dev, Source: src, NATSOptions: append([]nats.Option{
			nats.Timeout(10 * time.Second)}, opts...)})
		if err == nil {
			break
		}
		r.retries.Add(1)
		log.Debug("connect failed; retrying", "device", dev, "error", err)
		if !retryPause(ctx) {
			return nil, 0, nil
		}
	}
	return dc.Conn, time.Since(began), nil
}

// Floor subjects: a floor subscriber of device d watches its key's subject
// in the floor bucket and answers each value on floorAckPrefix+d with the
// value's round tag.
const floorAckPrefix = "bench.floor.ack."

// floorStoredAckPrefix is where a floor subscriber answers the stored copy
// of a value (republished by the bucket once stored).
const floorStoredAckPrefix = "bench.floor.storedack."

// runFloorSubscribers connects plain clients (static floor user, no
// callout, no product code) for devices f.from..f.to, each core-subscribed
// to its own key of the floor bucket, answering every value it sees.
func runFloorSubscribers(ctx context.Context, f childFlags, password string, emit func(childMsg), log *slog.Logger) error {
	var (
		r  ramp
		wg sync.WaitGroup
	)
	if dir := os.Getenv(EnvChildMemProfile); dir != "" {
		r.heapProfile = filepath.Join(dir, fmt.Sprintf("child-%s-%d-%d.heap.pprof", modeAgents, f.from, f.to))
	}
	r.connected.Add(f.to - f.from + 1)
	for i := f.from; i <= f.to; i++ {
		wg.Go(func() {
			dev := DeviceName(i)
			if !delay(ctx, f.window) {
				return
			}
			began := time.Now()
			var nc *nats.Conn
			for {
				var err error
				nc, err = nats.Connect(f.url, nats.UserInfo(floorUser, password), nats.Name("scalebench-floor "+dev), nats.Timeout(10*time.Second), nats.MaxReconnects(-1))
				if err == nil {
					break
				}
				r.retries.Add(1)
				log.Debug("floor connect failed; retrying", "device", dev, "error", err)
				if !retryPause(ctx) {
					return
				}
			}
			defer nc.Close()
			ack := floorAckPrefix + dev
			_, err := nc.Subscribe("$KV."+floorBucket+"."+dev, func(m *nats.Msg) {
				_ = nc.Publish(ack, roundTag(m.Data))
			})
			if err == nil {
				stored := floorStoredAckPrefix + dev
				_, err = nc.Subscribe(floorStoredPrefix+dev, func(m *nats.Msg) {
					_ = nc.Publish(stored, roundTag(m.Data))
				})
			}
			if err == nil {
				err = nc.Flush()
			}
			if err != nil {
				emit(childMsg{Kind: "error", Error: fmt.Sprintf("floor %s: subscribe: %v", dev, err)})
				return
			}
			r.done(time.Since(began))
			<-ctx.Done()
		})
	}
	r.report(ctx, emit)
	<-ctx.Done()
	wg.Wait()
	return nil
}

// roundTag is the part of a floor value before its first '|'.
func roundTag(v []byte) []byte {
	for i, b := range v {
		if b == '|' {
			return v[:i]
		}
	}
	return v
}

// child is a running child process, seen from the parent.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	msgs  chan childMsg
	done  chan error
	// stopped is set by stopChildren (one goroutine).
	stopped bool
}

// startChild starts the binary in child mode for devices from..to.
func startChild(o Options, mode string, f childFlags, env ...string) (*child, error) {
	args := append(slices.Clone(o.ExeArgs), "child", mode, "-url", f.url, "-from", strconv.Itoa(f.from), "-to", strconv.Itoa(f.to),
		"-window", f.window.String())
	if f.keys != "" {
		args = append(args, "-keys", f.keys)
	}
	cmd := exec.Command(o.Exe, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = o.ChildStderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("scalebench: child: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("scalebench: child: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("scalebench: start child %s: %w", o.Exe, err)
	}
	c := &child{cmd: cmd, stdin: stdin, msgs: make(chan childMsg, 16), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var m childMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = childMsg{Kind: "error", Error: "unreadable line: " + sc.Text()}
			}
			c.msgs <- m
		}
		close(c.msgs)
		c.done <- cmd.Wait()
	}()
	return c, nil
}

// stop closes the child's stdin (its signal to stop) and waits for it to
// exit; past the timeout it is killed.
func (c *child) stop(timeout time.Duration) error {
	_ = c.stdin.Close()
	go func() {
		for range c.msgs { // drain, so the reader reaches Wait
		}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-c.done:
		if err != nil {
			return fmt.Errorf("%w: %v", ErrChild, err)
		}
		return nil
	case <-t.C:
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("%w: pid %d did not stop within %s and was killed", ErrChild, c.cmd.Process.Pid, timeout)
	}
}

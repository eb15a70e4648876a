package natscluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Defaults of Options.
const (
	DefaultClusterName  = "fleet"
	DefaultReadyTimeout = 60 * time.Second
	// MaxNodes bounds Options.N: a JetStream cluster of more than this on one
	// machine is a mistake, not a test.
	MaxNodes = 9
)

// Options configure Start.
type Options struct {
	// N is the number of servers. Required: 1..MaxNodes (3 for R3 streams).
	// With 1 the server runs without a cluster block.
	N int
	// Dir holds each server's configuration, store and log (one folder per
	// server). Required; a test's temporary folder.
	Dir string
	// Config is the configuration every server starts from (accounts,
	// authorization, auth callout: the text the product ships, its
	// variables defined in front of it). Start appends the server's name,
	// ports, jetstream block and cluster block; Config must not set those.
	// It may hold passwords: the files are written with mode 0600.
	Config string
	// SyncInterval is the servers' fsync setting: empty means "always"
	// (ADR 0002: every write fsynced before the acknowledgement); otherwise
	// a duration such as "2m" (the server default).
	SyncInterval string
	// ClusterName is the cluster block's name. Default DefaultClusterName.
	ClusterName string
	// Binary is the nats-server executable. Default: Binary(ctx).
	Binary string
	// ReadyTimeout bounds each wait for a server to be healthy. Default
	// DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// MemoryLimit, when set, is each server process's GOMEMLIMIT (the Go
	// runtime's soft memory limit, as the production composition sets it
	// on its NATS nodes): a number of bytes with an optional unit B, KiB,
	// MiB, GiB or TiB, such as 1600MiB. Empty: no limit (GOGC alone).
	MemoryLimit string
	// Profile serves each server's Go profiles (nats-server's prof_port:
	// /debug/pprof/heap and the others) on a loopback port, ProfileURL.
	Profile bool
}

// memoryLimit is GOMEMLIMIT's form.
var memoryLimit = regexp.MustCompile(`^[0-9]+(B|KiB|MiB|GiB|TiB)?$`)

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.N < 1 || o.N > MaxNodes {
		errs = append(errs, fmt.Errorf("natscluster: N is %d: use 1..%d servers (3 for R3 streams)", o.N, MaxNodes))
	}
	if o.Dir == "" {
		errs = append(errs, errors.New("natscluster: Dir is empty: give a folder for the servers' stores, configurations and logs"))
	}
	for _, key := range []string{"server_name", "cluster", "jetstream {", "listen:"} {
		if strings.Contains(o.Config, "\n"+key) || strings.HasPrefix(o.Config, key) {
			errs = append(errs, fmt.Errorf("natscluster: Config sets %q at the top level: Start writes it per server; remove it", key))
		}
	}
	if o.MemoryLimit != "" && !memoryLimit.MatchString(o.MemoryLimit) {
		errs = append(errs, fmt.Errorf("natscluster: MemoryLimit %q: use bytes with an optional unit B, KiB, MiB, GiB or TiB, such as 1600MiB (GOMEMLIMIT's form)", o.MemoryLimit))
	}
	if o.SyncInterval != "" && o.SyncInterval != "always" {
		if _, err := time.ParseDuration(o.SyncInterval); err != nil {
			errs = append(errs, fmt.Errorf("natscluster: SyncInterval %q: use empty (always) or a duration such as 2m", o.SyncInterval))
		}
	}
	return errors.Join(errs...)
}

// Cluster is a running set of nats-server processes. Its methods are safe
// for concurrent use.
type Cluster struct {
	o     Options
	nodes []*node
}

// node is one server: its fixed ports and files, and its process while
// it runs.
type node struct {
	name                         string
	client, route, monitor, prof int
	dir, conf, log               string

	mu   sync.Mutex // guards cmd and done
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exited
}

// Start writes each server's configuration, starts the servers and waits
// until every one is healthy (JetStream up and in contact with a meta
// leader) and, with more than one server, until the meta leader counts
// every other server current and online (MetaPeers): until then it may
// refuse to place a replicated stream ("no suitable peers for placement,
// peer offline", JetStream error 10005). Each wait is bounded by ctx and
// Options.ReadyTimeout. On an error the servers started are killed.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.ClusterName == "" {
		o.ClusterName = DefaultClusterName
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	if o.Binary == "" {
		bin, err := Binary(ctx)
		if err != nil {
			return nil, err
		}
		o.Binary = bin
	}
	ports, err := freePorts(4 * o.N)
	if err != nil {
		return nil, err
	}
	c := &Cluster{o: o}
	for i := range o.N {
		n := &node{name: fmt.Sprintf("n%d", i+1), client: ports[4*i], route: ports[4*i+1], monitor: ports[4*i+2], prof: ports[4*i+3]}
		n.dir = filepath.Join(o.Dir, n.name)
		n.conf, n.log = filepath.Join(n.dir, "nats-server.conf"), filepath.Join(n.dir, "nats-server.log")
		if err := os.MkdirAll(filepath.Join(n.dir, "store"), 0o700); err != nil {
			return nil, fmt.Errorf("natscluster: %w", err)
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := os.WriteFile(n.conf, []byte(c.config(n)), 0o600); err != nil {
			return nil, fmt.Errorf("natscluster: %w", err)
		}
	}
	for i := range c.nodes {
		if err := c.spawn(i); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		err = fmt.Errorf("%w\n%s", err, c.LogTails(20))
		c.Close()
		return nil, err
	}
	if o.N > 1 {
		if err := c.waitMetaPeers(ctx); err != nil {
			err = fmt.Errorf("%w\n%s", err, c.LogTails(20))
			c.Close()
			return nil, err
		}
	}
	return c, nil
}

// config is n's configuration: Options.Config, then n's own settings.
func (c *Cluster) config(n *node) string {
	var b strings.Builder
	b.WriteString(c.o.Config)
	sync := c.o.SyncInterval
	if sync == "" {
		sync = "always"
	}
	fmt.Fprintf(&b, "\n# natscluster: server %s\nserver_name: %q\nlisten: \"127.0.0.1:%d\"\nhttp: \"127.0.0.1:%d\"\n",
		n.name, n.name, n.client, n.monitor)
	if c.o.Profile {
		fmt.Fprintf(&b, "prof_port: %d\n", n.prof)
	}
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n  sync_interval: %s\n}\n", filepath.Join(n.dir, "store"), sync)
	if c.o.N > 1 {
		var routes []string
		for _, m := range c.nodes {
			if m != n {
				routes = append(routes, fmt.Sprintf("%q", "nats-route://127.0.0.1:"+strconv.Itoa(m.route)))
			}
		}
		fmt.Fprintf(&b, "cluster {\n  name: %q\n  listen: \"127.0.0.1:%d\"\n  routes: [ %s ]\n}\n",
			c.o.ClusterName, n.route, strings.Join(routes, ", "))
	}
	return b.String()
}

// ephemeralRangeFile holds the kernel's ephemeral port range: "low high".
const ephemeralRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// ephemeralRange is the kernel's ephemeral port range, from which it
// picks the local port of an outgoing connection and of a :0 listener.
func ephemeralRange() (lo, hi int, err error) {
	b, err := os.ReadFile(ephemeralRangeFile)
	if err != nil {
		return 0, 0, fmt.Errorf("natscluster: the ephemeral port range: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 2 {
		lo, err1 := strconv.Atoi(f[0])
		hi, err2 := strconv.Atoi(f[1])
		if err1 == nil && err2 == nil && lo <= hi {
			return lo, hi, nil
		}
	}
	return 0, 0, fmt.Errorf("natscluster: the ephemeral port range: %s holds %q", ephemeralRangeFile, b)
}

// minPort is the lowest port freePorts chooses.
const minPort = 10000

// freePorts returns n distinct loopback ports that are free now and lie
// outside the kernel's ephemeral range (ephemeralRange): chosen at random
// from [minPort, low-1], or above the range when the room below is too
// small, each bound once (all held open together, so none repeats, then
// released). No outgoing connection or :0 listener of another process can
// take such a port, so a server killed and restarted (Restart) finds its
// ports free; only another process choosing ports the same way could,
// which the random choice makes unlikely.
func freePorts(n int) ([]int, error) {
	lo, hi, err := ephemeralRange()
	if err != nil {
		return nil, err
	}
	first, last := minPort, lo-1
	if last-first+1 < 100*n {
		first, last = max(hi+1, minPort), 65535
	}
	if last-first+1 < 100*n {
		return nil, fmt.Errorf("natscluster: no room for %d ports outside the ephemeral range %d-%d (%s)", n, lo, hi, ephemeralRangeFile)
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n {
			return nil, fmt.Errorf("natscluster: %d free ports in %d-%d: found %d in %d tries", n, first, last, len(ports), tries)
		}
		p := first + rand.IntN(last-first+1)
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			continue // in use (or chosen already: held open)
		}
		lns = append(lns, ln)
		ports = append(ports, p)
	}
	return ports, nil
}

// spawn starts server i's process; its output is appended to its log.
func (c *Cluster) spawn(i int) error {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		select {
		case <-n.done:
		default:
			return fmt.Errorf("natscluster: server %s is running", n.name)
		}
	}
	logf, err := os.OpenFile(n.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("natscluster: %w", err)
	}
	fmt.Fprintf(logf, "=== natscluster: start %s at %s\n", n.name, time.Now().UTC().Format(time.RFC3339Nano))
	cmd := exec.Command(c.o.Binary, "-c", n.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	if c.o.MemoryLimit != "" {
		cmd.Env = append(os.Environ(), "GOMEMLIMIT="+c.o.MemoryLimit)
	}
	// The server dies with the process that started it, even when that one
	// is killed (a test binary past its timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("natscluster: start %s: %w", n.name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	n.cmd, n.done = cmd, done
	return nil
}

// N is the number of servers.
func (c *Cluster) N() int { return len(c.nodes) }

// Name is server i's name (n1, n2, …): the server_name JetStream reports
// as a stream's leader or replica.
func (c *Cluster) Name(i int) string { return c.nodes[i].name }

// Index is the index of the server named name, or -1.
func (c *Cluster) Index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	return -1
}

// ClientURL is server i's client URL.
func (c *Cluster) ClientURL(i int) string {
	return "nats://127.0.0.1:" + strconv.Itoa(c.nodes[i].client)
}

// ClientURLs are every server's client URL.
func (c *Cluster) ClientURLs() []string {
	urls := make([]string, len(c.nodes))
	for i := range c.nodes {
		urls[i] = c.ClientURL(i)
	}
	return urls
}

// URL is every server's client URL, comma-separated: what nats.Connect
// takes to know the whole cluster before it learns it from the servers.
func (c *Cluster) URL() string { return strings.Join(c.ClientURLs(), ",") }

// ProfileURL is server i's profiling address (/debug/pprof/heap, ...);
// empty unless Options.Profile.
func (c *Cluster) ProfileURL(i int) string {
	if !c.o.Profile {
		return ""
	}
	return "http://127.0.0.1:" + strconv.Itoa(c.nodes[i].prof)
}

// MonitorURL is server i's HTTP monitoring address (/varz, /jsz, ...).
func (c *Cluster) MonitorURL(i int) string {
	return "http://127.0.0.1:" + strconv.Itoa(c.nodes[i].monitor)
}

// PID is server i's process id, or 0 when it does not run.
func (c *Cluster) PID(i int) int {
	n := c.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || isClosed(n.done) {
		return 0
	}
	return n.cmd.Process.Pid
}

// Running reports whether server i's process runs.
func (c *Cluster) Running(i int) bool { return c.PID(i) != 0 }

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Kill sends server i SIGKILL and waits until the process is gone: no
// shutdown, no flush, no leadership transfer (a crash, or the OOM killer).
func (c *Cluster) Kill(i int) error { return c.signal(i, syscall.SIGKILL) }

// Stop sends server i SIGTERM (a clean shutdown) and waits until it exits.
func (c *Cluster) Stop(i int) error { return c.signal(i, syscall.SIGTERM) }

func (c *Cluster) signal(i int, sig syscall.Signal) error {
	n := c.nodes[i]
	n.mu.Lock()
	cmd, done := n.cmd, n.done
	n.mu.Unlock()
	if cmd == nil || isClosed(done) {
		return fmt.Errorf("natscluster: server %s does not run", n.name)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("natscluster: %s %s: %w", sig, n.name, err)
	}
	<-done
	return nil
}

// Restart starts server i again on its store, ports and configuration and
// waits until it is healthy (it has caught up with the meta leader).
func (c *Cluster) Restart(ctx context.Context, i int) error {
	if err := c.spawn(i); err != nil {
		return err
	}
	if err := c.waitHealthy(ctx, i); err != nil {
		return fmt.Errorf("%w\n%s", err, c.LogTail(i, 30))
	}
	return nil
}

// Healthy reports whether server i answers its /healthz with 200: it
// accepts clients and its JetStream is current with the meta leader.
func (c *Cluster) Healthy(ctx context.Context, i int) bool {
	if !c.Running(i) {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.MonitorURL(i)+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// WaitHealthy waits until every running server is healthy, at most
// Options.ReadyTimeout each.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	for i := range c.nodes {
		if !c.Running(i) {
			continue
		}
		if err := c.waitHealthy(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) waitHealthy(ctx context.Context, i int) error {
	ctx, cancel := context.WithTimeout(ctx, c.o.ReadyTimeout)
	defer cancel()
	wait := 20 * time.Millisecond
	for !c.Healthy(ctx, i) {
		if !c.Running(i) {
			return fmt.Errorf("natscluster: server %s exited before it was healthy", c.nodes[i].name)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("natscluster: server %s not healthy within %s: %w", c.nodes[i].name, c.o.ReadyTimeout, ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
	return nil
}

// MetaPeer is one peer of the JetStream meta group as the meta leader
// counts it (its /jsz meta_cluster replicas).
type MetaPeer struct {
	// Name is the server's name (n1, n2, …).
	Name string `json:"name"`
	// Current: the leader heard from it lately and it is caught up.
	Current bool `json:"current"`
	// Offline: the leader has not heard from it lately.
	Offline bool `json:"offline,omitempty"`
}

// jsz is what MetaPeers reads of a server's /jsz.
type jsz struct {
	Meta *struct {
		Leader   string     `json:"leader"`
		Replicas []MetaPeer `json:"replicas"`
	} `json:"meta_cluster"`
}

// MetaPeers returns the name of the meta leader among the running
// servers and the other peers of the meta group as it counts them, from
// its /jsz; an error when no running server says it leads.
func (c *Cluster) MetaPeers(ctx context.Context) (string, []MetaPeer, error) {
	var errs []error
	for i, n := range c.nodes {
		if !c.Running(i) {
			continue
		}
		j, err := c.jsz(ctx, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if j.Meta != nil && j.Meta.Leader == n.name {
			return n.name, j.Meta.Replicas, nil
		}
	}
	return "", nil, fmt.Errorf("natscluster: no running server says it is the meta leader: %w", errors.Join(errs...))
}

// jsz reads server i's /jsz.
func (c *Cluster) jsz(ctx context.Context, i int) (jsz, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var j jsz
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.MonitorURL(i)+"/jsz", nil)
	if err != nil {
		return j, fmt.Errorf("natscluster: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return j, fmt.Errorf("natscluster: %s's /jsz: %w", c.nodes[i].name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return j, fmt.Errorf("natscluster: %s's /jsz: %s", c.nodes[i].name, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&j); err != nil {
		return j, fmt.Errorf("natscluster: %s's /jsz: %w", c.nodes[i].name, err)
	}
	return j, nil
}

// metaPeersCurrent reports whether the meta leader counts every other
// server current and online, and says what it counts otherwise.
func (c *Cluster) metaPeersCurrent(ctx context.Context) (bool, string) {
	leader, peers, err := c.MetaPeers(ctx)
	if err != nil {
		return false, err.Error()
	}
	ok := map[string]bool{}
	for _, p := range peers {
		ok[p.Name] = p.Current && !p.Offline
	}
	for _, n := range c.nodes {
		if n.name != leader && !ok[n.name] {
			return false, fmt.Sprintf("the meta leader %s counts %+v", leader, peers)
		}
	}
	return true, ""
}

// waitMetaPeers waits until metaPeersCurrent, at most
// Options.ReadyTimeout.
func (c *Cluster) waitMetaPeers(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.o.ReadyTimeout)
	defer cancel()
	wait := 20 * time.Millisecond
	for {
		ok, last := c.metaPeersCurrent(ctx)
		if ok {
			return nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("natscluster: the meta leader did not count every server current within %s: %w (last: %s)", c.o.ReadyTimeout, ctx.Err(), last)
		case <-t.C:
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// LogPath is server i's log file.
func (c *Cluster) LogPath(i int) string { return c.nodes[i].log }

// LogTail is the last lines of server i's log, headed by its name.
func (c *Cluster) LogTail(i, lines int) string {
	b, err := os.ReadFile(c.nodes[i].log)
	if err != nil {
		return fmt.Sprintf("--- %s: no log: %v\n", c.nodes[i].name, err)
	}
	ls := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return fmt.Sprintf("--- last %d lines of %s's log (%s):\n%s\n", len(ls), c.nodes[i].name, c.nodes[i].log, bytes.Join(ls, []byte("\n")))
}

// LogTails is LogTail of every server.
func (c *Cluster) LogTails(lines int) string {
	var b strings.Builder
	for i := range c.nodes {
		b.WriteString(c.LogTail(i, lines))
	}
	return b.String()
}

// Close kills every running server and waits for it. Calling it twice is
// harmless.
func (c *Cluster) Close() {
	for i := range c.nodes {
		if c.Running(i) {
			_ = c.Kill(i)
		}
	}
}

package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/internal/natscluster"
)

// fleetServers are the NATS servers of a run as the measurements see them:
// the embedded server in this process, or a cluster of nats-server
// processes (Options.Servers).
type fleetServers interface {
	// urlFor is the client URL child process i connects to: the children
	// are spread over the servers in turn.
	urlFor(i int) string
	// clients is the number of client connections over every server.
	clients(ctx context.Context) (int, error)
	// consumers is the number of JetStream consumers, every account and
	// stream, each counted once.
	consumers(ctx context.Context) (int, error)
	// rss is the resident memory of the server processes, summed; 0 for
	// the embedded server (it is this process: measureMemory).
	rss() uint64
	// heap is the server processes' Go heap in use after a forced
	// collection and their goroutine stacks, summed; zero for the embedded
	// server (measureMemory).
	heap(ctx context.Context) (serverMemory, error)
	// heapProfiles writes each server process's heap profile into dir
	// (nothing for the embedded server: it is this process).
	heapProfiles(ctx context.Context, dir string) error
}

// embeddedServer is the one server in this process.
type embeddedServer struct{ srv *natsembed.Server }

func (e embeddedServer) urlFor(int) string { return e.srv.ClientURL() }
func (e embeddedServer) rss() uint64       { return 0 }

func (e embeddedServer) heap(context.Context) (serverMemory, error) { return serverMemory{}, nil }
func (e embeddedServer) heapProfiles(context.Context, string) error { return nil }

func (e embeddedServer) clients(context.Context) (int, error) { return e.srv.NATS().NumClients(), nil }

func (e embeddedServer) consumers(context.Context) (int, error) { return consumers(e.srv.NATS()) }

// clusterServers are nats-server processes (internal/natscluster), read
// through their HTTP monitoring endpoints.
type clusterServers struct {
	c    *natscluster.Cluster
	http *http.Client
}

func newClusterServers(c *natscluster.Cluster) clusterServers {
	return clusterServers{c: c, http: &http.Client{Timeout: 30 * time.Second}}
}

func (s clusterServers) urlFor(i int) string { return s.c.ClientURL(i % s.c.N()) }

// get decodes server i's monitoring endpoint path into v.
func (s clusterServers) get(ctx context.Context, i int, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.c.MonitorURL(i)+path, nil)
	if err != nil {
		return fmt.Errorf("scalebench: %w", err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return fmt.Errorf("scalebench: server %s%s: %w", s.c.Name(i), path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("scalebench: server %s%s: %s", s.c.Name(i), path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("scalebench: server %s%s: %w", s.c.Name(i), path, err)
	}
	return nil
}

func (s clusterServers) clients(ctx context.Context) (int, error) {
	total := 0
	for i := range s.c.N() {
		var v struct {
			Connections int `json:"connections"`
		}
		if err := s.get(ctx, i, "/varz", &v); err != nil {
			return 0, err
		}
		total += v.Connections
	}
	return total, nil
}

// consumers counts distinct consumers over every server: a replicated
// consumer is on several servers, an R1 consumer on one.
func (s clusterServers) consumers(ctx context.Context) (int, error) {
	seen := map[[3]string]bool{}
	for i := range s.c.N() {
		var v server.JSInfo
		if err := s.get(ctx, i, "/jsz?accounts=true&streams=true&consumers=true", &v); err != nil {
			return 0, err
		}
		for _, a := range v.AccountDetails {
			for _, sd := range a.Streams {
				for _, ci := range sd.Consumer {
					seen[[3]string{a.Name, sd.Name, ci.Name}] = true
				}
			}
		}
	}
	return len(seen), nil
}

func (s clusterServers) rss() uint64 {
	var total uint64
	for i := range s.c.N() {
		if pid := s.c.PID(i); pid != 0 {
			total += pidRSS(pid)
		}
	}
	return total
}

// profile reads server i's heap profile endpoint (prof_port) with query;
// the garbage is collected first.
func (s clusterServers) profile(ctx context.Context, i int, query string) ([]byte, error) {
	base := s.c.ProfileURL(i)
	if base == "" {
		return nil, fmt.Errorf("scalebench: server %s serves no profiles: start the cluster with natscluster.Options.Profile", s.c.Name(i))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/debug/pprof/heap?gc=1"+query, nil)
	if err != nil {
		return nil, fmt.Errorf("scalebench: %w", err)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scalebench: server %s heap profile: %w", s.c.Name(i), err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scalebench: server %s heap profile: %w", s.c.Name(i), err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scalebench: server %s heap profile: %s", s.c.Name(i), resp.Status)
	}
	return b, nil
}

func (s clusterServers) heap(ctx context.Context) (serverMemory, error) {
	var total serverMemory
	for i := range s.c.N() {
		b, err := s.profile(ctx, i, "&debug=1")
		if err != nil {
			return serverMemory{}, err
		}
		m, err := profileMemory(b)
		if err != nil {
			return serverMemory{}, fmt.Errorf("scalebench: server %s: %w", s.c.Name(i), err)
		}
		total.Heap += m.Heap
		total.Stacks += m.Stacks
	}
	return total, nil
}

func (s clusterServers) heapProfiles(ctx context.Context, dir string) error {
	for i := range s.c.N() {
		b, err := s.profile(ctx, i, "")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "server-"+s.c.Name(i)+".heap.pprof"), b, 0o600); err != nil {
			return fmt.Errorf("scalebench: %w", err)
		}
	}
	return nil
}

// serverMemory is Go memory of nats-server processes, bytes: heap in use
// and goroutine stacks in use.
type serverMemory struct {
	Heap, Stacks uint64
}

// profileMemory reads HeapInuse and the stacks in use from a text heap
// profile (debug=1), whose runtime.MemStats comment lines end it ("#
// HeapInuse = n", "# Stack = inuse / sys").
func profileMemory(text []byte) (serverMemory, error) {
	var m serverMemory
	var heap, stack bool
	for line := range strings.Lines(string(text)) {
		if v, ok := strings.CutPrefix(line, "# HeapInuse = "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return m, fmt.Errorf("heap profile: HeapInuse %q: %w", v, err)
			}
			m.Heap, heap = n, true
		}
		if v, ok := strings.CutPrefix(line, "# Stack = "); ok {
			inuse, _, _ := strings.Cut(v, " / ")
			n, err := strconv.ParseUint(strings.TrimSpace(inuse), 10, 64)
			if err != nil {
				return m, fmt.Errorf("heap profile: Stack %q: %w", v, err)
			}
			m.Stacks, stack = n, true
		}
	}
	if !heap || !stack {
		return m, errors.New("heap profile: no HeapInuse or Stack line")
	}
	return m, nil
}

// pidRSS is process pid's VmRSS in bytes (0 when unknown).
func pidRSS(pid int) uint64 {
	return statusRSS("/proc/" + strconv.Itoa(pid) + "/status")
}

// statusRSS reads VmRSS from a /proc status file, in bytes (0 when
// unknown).
func statusRSS(path string) uint64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

package dev_test

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/internal/procfs"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

var (
	reIssuer     = regexp.MustCompile(`(?m)^\s*OpenID Provider\s+(http://\S+)`)
	reKubeServer = regexp.MustCompile(`(?m)^\s*server: (https://\S+)$`)
	// reListenerRow is a row of docs/fleet.md's listener table: its first
	// cell names the listener.
	reListenerRow = regexp.MustCompile(`(?m)^\| ([^|]+?) \|`)
)

// listenerTableMarker precedes the listener table of docs/fleet.md.
const listenerTableMarker = "<!-- fleet-dev-listeners -->"

// documentedListeners are the names of the rows of docs/fleet.md's table
// of what fleet dev listens on, sorted.
func documentedListeners(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "fleet.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(b), listenerTableMarker)
	if !ok {
		t.Fatalf("docs/fleet.md has no %s marker before its listener table", listenerTableMarker)
	}
	table = strings.TrimSpace(table)
	if end := strings.Index(table, "\n\n"); end >= 0 {
		table = table[:end]
	}
	var names []string
	for i, m := range reListenerRow.FindAllStringSubmatch(table, -1) {
		if i == 0 { // the header (the separator row has no spaces)
			continue
		}
		names = append(names, strings.Trim(m[1], "`* "))
	}
	slices.Sort(names)
	return names
}

// urlPort is the port of a printed URL.
func urlPort(t *testing.T, raw string) uint16 {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.ParseUint(u.Port(), 10, 16)
	if err != nil {
		t.Fatalf("%s names no port", raw)
	}
	return uint16(p)
}

// flagPorts are the ports of etcd's URL flags of process pid: listener
// name → port.
func etcdFlagPorts(t *testing.T, pid int) map[uint16]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint16]string{}
	for _, arg := range strings.Split(string(b), "\x00") {
		for flag, name := range map[string]string{"--listen-client-urls=": "etcd client", "--listen-peer-urls=": "etcd peer"} {
			if v, ok := strings.CutPrefix(arg, flag); ok {
				for _, u := range strings.Split(v, ",") {
					out[urlPort(t, u)] = name
				}
			}
		}
	}
	return out
}

// TestEveryListenerOfFleetDevIsDocumented runs fleet dev and names every
// TCP socket its process tree listens on (from /proc) by what fleet dev
// printed: the table of docs/fleet.md must list exactly those, and with
// the default --listen every one is on loopback.
func TestEveryListenerOfFleetDevIsDocumented(t *testing.T) {
	needKube(t)
	documented := documentedListeners(t)
	p := startDev(t, t.TempDir(), "--devices", "1", "--runtime", "sim")
	defer p.stop(t)

	iss, dash := reIssuer.FindStringSubmatch(p.out), reDashboard.FindStringSubmatch(p.out)
	kc, err := os.ReadFile(p.in.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	kube := reKubeServer.FindStringSubmatch(string(kc))
	if iss == nil || dash == nil || kube == nil {
		t.Fatalf("fleet dev printed no provider or dashboard URL, or its kubeconfig names no server:\n%s", p.out)
	}
	fleetPorts := map[uint16]string{
		urlPort(t, p.in.NATSURL): "NATS", urlPort(t, iss[1]): "OpenID Provider", urlPort(t, p.in.OpenBaoAddr): "OpenBao stand-in",
		urlPort(t, p.in.MetricsURL): "metrics", urlPort(t, dash[1]): "dashboard",
	}
	kubePort := urlPort(t, kube[1])

	// The kernel's socket table is read in chunks while sockets come and
	// go (the devices' connections): read until the two agree, or report
	// the last reading.
	var found []string
	_ = testenv.Poll(t.Context(), time.Minute, func() bool {
		found = p.listeners(t, fleetPorts, kubePort)
		return cmp.Equal(documented, found)
	})
	if diff := cmp.Diff(documented, found); diff != "" {
		t.Errorf("docs/fleet.md's listener table (-) against what fleet dev's processes listen on (+):\n%s", diff)
	}
}

// listeners names every TCP listener of fleet dev's process tree, sorted:
// fleet's own by fleetPorts, etcd's by its flags, kube-apiserver's by
// kubePort; any other is "unknown: …". Every one must be on loopback.
func (p *devProc) listeners(t *testing.T, fleetPorts map[uint16]string, kubePort uint16) []string {
	t.Helper()
	var found []string
	pids := []int{p.cmd.Process.Pid}
	for i := 0; i < len(pids); i++ {
		pids = append(pids, procfs.Children(pids[i])...)
	}
	for _, pid := range pids {
		_, comm, ok := procfs.Stat(pid)
		if !ok {
			continue
		}
		addrs, err := procfs.ListeningTCP(pid)
		if err != nil {
			t.Fatal(err)
		}
		var names map[uint16]string
		switch {
		case pid == p.cmd.Process.Pid:
			names = fleetPorts
		case comm == "etcd":
			names = etcdFlagPorts(t, pid)
		case comm == "kube-apiserver":
			names = map[uint16]string{kubePort: "kube-apiserver"}
		}
		for _, a := range addrs {
			name, ok := names[a.Port()]
			if !ok {
				name = "unknown: " + comm + " on " + a.String()
			}
			found = append(found, name)
			if !a.Addr().IsLoopback() {
				t.Errorf("%s (%s) listens on %v with the default --listen: want loopback only", name, comm, a)
			}
		}
	}
	slices.Sort(found)
	return found
}

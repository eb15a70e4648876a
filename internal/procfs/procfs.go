// Package procfs reads what Fleet's local process management needs from
// Linux's /proc: whether a PID runs, its parent, its children, its command
// name and the TCP addresses it listens on. The test harness and `fleet
// dev` use it to find and stop the servers they started (and those a killed
// run left behind); tests use it to see what a process tree listens on.
package procfs

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Stat returns the parent PID and command name of pid from /proc/<pid>/stat.
func Stat(pid int) (ppid int, comm string, ok bool) {
	if pid <= 0 {
		return 0, "", false
	}
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, "", false
	}
	// Format: pid (comm) state ppid ...; comm may contain spaces and parens.
	open, end := bytes.IndexByte(data, '('), bytes.LastIndexByte(data, ')')
	if open < 0 || end < open {
		return 0, "", false
	}
	fields := strings.Fields(string(data[end+1:]))
	if len(fields) < 2 {
		return 0, "", false
	}
	ppid, err = strconv.Atoi(fields[1])
	if err != nil {
		return 0, "", false
	}
	return ppid, string(data[open+1 : end]), true
}

// Alive reports whether pid names a running process (zombies count as gone).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	end := bytes.LastIndexByte(data, ')')
	return end < 0 || !bytes.HasPrefix(bytes.TrimSpace(data[end+1:]), []byte("Z"))
}

// Children returns the PIDs whose parent is pid, in increasing order.
func Children(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, _, ok := Stat(child); ok && ppid == pid {
			out = append(out, child)
		}
	}
	slices.Sort(out)
	return out
}

// tcpListen is the state column of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// ListeningTCP returns the local addresses of the TCP sockets pid holds
// open that are in the LISTEN state (IPv4 and IPv6), sorted, each once. It
// reads the process's file descriptors, so it needs the right to (the same
// user, or root). The kernel's socket table is not read atomically: a
// caller that must not miss a socket while others come and go reads again.
func ListeningTCP(pid int) ([]netip.AddrPort, error) {
	fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return nil, fmt.Errorf("procfs: file descriptors of %d: %w", pid, err)
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var out []netip.AddrPort
	for _, table := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "net", table))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("procfs: sockets of %d: %w", pid, err)
		}
		lines := strings.Split(string(data), "\n")
		for _, line := range lines[1:] {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode …
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != tcpListen || !inodes[f[9]] {
				continue
			}
			ap, err := parseSocketAddr(f[1])
			if err != nil {
				return nil, fmt.Errorf("procfs: %s of %d: %w", table, pid, err)
			}
			out = append(out, ap)
		}
	}
	// The kernel's table is read in several chunks: a socket opened or
	// closed meanwhile may repeat a line.
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out), nil
}

// parseSocketAddr parses a /proc/net/tcp address, "<hex ip>:<hex port>",
// where the IP is in 32-bit words of host (little-endian) byte order.
func parseSocketAddr(s string) (netip.AddrPort, error) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q: no port", s)
	}
	raw, err := hex.DecodeString(hexIP)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q: bad IP", s)
	}
	for i := 0; i < len(raw); i += 4 {
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("address %q: bad port", s)
	}
	ip, _ := netip.AddrFromSlice(raw)
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), nil
}

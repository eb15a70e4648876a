// Package procfs reads what Fleet's local process management needs from
// Linux's /proc: whether a PID runs, its parent and its command name. The
// test harness and `fleet dev` use it to find and stop the servers they
// started (and those a killed run left behind).
package procfs

import (
	"bytes"
	"os"
	"path/filepath"
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

package devenv

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A fleet dev killed with SIGKILL never stops etcd and kube-apiserver (envtest
// runs them in their own process group), and the orphaned etcd would hold
// <data>/etcd. So a run claims the data folder in <data>/run/owner, records
// the two processes in <data>/run/kube.pids, and the next run kills recorded
// processes whose owner is gone before it starts its own.

// serverComms are the recorded process names (/proc/<pid>/comm).
var serverComms = map[string]bool{"etcd": true, "kube-apiserver": true}

// claimDataDir refuses a data folder another live fleet dev uses, kills the
// kube processes an earlier run left behind, and marks the folder as this
// process's. release undoes the claim.
func claimDataDir(dataDir string) (release func(), err error) {
	runDir := filepath.Join(dataDir, "run")
	if err := os.MkdirAll(runDir, 0o700); err != nil {
		return nil, fmt.Errorf("fleet dev: run folder: %w", err)
	}
	owner := filepath.Join(runDir, "owner")
	self := os.Getpid()
	if b, err := os.ReadFile(owner); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid != self && sameProgramAlive(pid) {
			return nil, fmt.Errorf("%w: process %d runs fleet dev on --data-dir %s: stop it or pass another --data-dir", ErrDataDirInUse, pid, dataDir)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("fleet dev: %w", err)
	}
	if err := sweepOrphans(filepath.Join(runDir, "kube.pids")); err != nil {
		return nil, err
	}
	if err := os.WriteFile(owner, []byte(strconv.Itoa(self)+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("fleet dev: claim --data-dir: %w", err)
	}
	return func() {
		_ = os.Remove(filepath.Join(runDir, "kube.pids"))
		_ = os.Remove(owner)
	}, nil
}

// recordKube writes the PIDs of this process's etcd and kube-apiserver
// children to <data>/run/kube.pids (best effort).
func recordKube(dataDir string) {
	self := os.Getpid()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	var pids []string
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, comm, ok := procStat(pid); ok && ppid == self && serverComms[comm] {
			pids = append(pids, strconv.Itoa(pid))
		}
	}
	_ = os.WriteFile(filepath.Join(dataDir, "run", "kube.pids"), []byte(strings.Join(pids, "\n")+"\n"), 0o600)
}

// sweepOrphans kills the recorded etcd and kube-apiserver processes that
// still run (their owner is gone: claimDataDir checked) and waits until they
// are gone.
func sweepOrphans(record string) error {
	data, err := os.ReadFile(record)
	if err != nil {
		return nil
	}
	var killed []int
	for _, f := range strings.Fields(string(data)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			continue
		}
		if _, comm, ok := procStat(pid); ok && serverComms[comm] && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, pid)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range killed {
		for processAlive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("fleet dev: process %d left by an earlier run does not stop: kill it", pid)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	_ = os.Remove(record)
	return nil
}

// sameProgramAlive reports whether pid runs and has this process's name (a
// reused PID of another program does not count).
func sameProgramAlive(pid int) bool {
	if !processAlive(pid) {
		return false
	}
	_, comm, ok := procStat(pid)
	_, self, sok := procStat(os.Getpid())
	return ok && sok && comm == self
}

// procStat returns the parent PID and command name of pid from /proc.
func procStat(pid int) (ppid int, comm string, ok bool) {
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

// processAlive reports whether pid exists (zombies count as gone).
func processAlive(pid int) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	end := bytes.LastIndexByte(data, ')')
	return end < 0 || !bytes.HasPrefix(bytes.TrimSpace(data[end+1:]), []byte("Z"))
}

package dev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nationtech/harmony-fleet/internal/procfs"
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
		if ppid, comm, ok := procfs.Stat(pid); ok && ppid == self && serverComms[comm] {
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
		if _, comm, ok := procfs.Stat(pid); ok && serverComms[comm] && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, pid)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range killed {
		for procfs.Alive(pid) {
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
	if !procfs.Alive(pid) {
		return false
	}
	_, comm, ok := procfs.Stat(pid)
	_, self, sok := procfs.Stat(os.Getpid())
	return ok && sok && comm == self
}

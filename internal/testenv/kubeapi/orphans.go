package kubeapi

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nationtech/harmony-fleet/internal/procfs"
)

// A test binary killed by `go test -timeout` (or by hand) never runs Stop, and
// its etcd and kube-apiserver would run on forever. So Start records the
// server's processes in .cache/run/kubeapi/<test pid>-<n>, Stop removes the
// record, and the next Start (and scripts/stop.sh) kills the processes of
// records whose test process is gone.

// serverComms are the process names (from /proc/<pid>/comm) recorded.
var serverComms = map[string]bool{apiServerBin: true, etcdBin: true}

// recordChildren writes the PIDs of this process's etcd and kube-apiserver
// children to a new file in runDir and returns its path ("" on failure:
// recording is best effort and never fails a test).
func recordChildren(runDir string) string {
	self := os.Getpid()
	var pids []string
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return ""
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, comm, ok := procfs.Stat(pid); ok && ppid == self && serverComms[comm] {
			pids = append(pids, strconv.Itoa(pid))
		}
	}
	if len(pids) == 0 || os.MkdirAll(runDir, 0o755) != nil {
		return ""
	}
	path := filepath.Join(runDir, fmt.Sprintf("%d-%d", self, time.Now().UnixNano()))
	if os.WriteFile(path, []byte(strings.Join(pids, "\n")+"\n"), 0o644) != nil {
		return ""
	}
	return path
}

// sweepOrphans kills the recorded processes of test processes that no longer
// run and removes their records.
func sweepOrphans(runDir string) {
	entries, err := os.ReadDir(runDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		owner, _, ok := strings.Cut(e.Name(), "-")
		ownerPID, err := strconv.Atoi(owner)
		if !ok || err != nil || procfs.Alive(ownerPID) {
			continue
		}
		path := filepath.Join(runDir, e.Name())
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if _, comm, ok := procfs.Stat(pid); ok && serverComms[comm] {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		_ = os.Remove(path)
	}
}

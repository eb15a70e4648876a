package procfs_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/procfs"
)

func TestStatAndAliveTellThisProcessFromAGoneOne(t *testing.T) {
	ppid, comm, ok := procfs.Stat(os.Getpid())
	if !ok || ppid != os.Getppid() || comm != filepath.Base(os.Args[0])[:min(15, len(filepath.Base(os.Args[0])))] {
		t.Errorf("Stat(self) = %d, %q, %v; want parent %d and this program's name", ppid, comm, ok, os.Getppid())
	}
	if !procfs.Alive(os.Getpid()) {
		t.Error("Alive(self) = false")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if procfs.Alive(cmd.Process.Pid) {
		t.Errorf("Alive(%d) after it exited and was reaped = true", cmd.Process.Pid)
	}
	if procfs.Alive(0) || procfs.Alive(-1) {
		t.Error("Alive of a PID that cannot exist = true")
	}
}

package procfs_test

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

func TestListeningTCPNamesTheAddressesThisProcessListensOn(t *testing.T) {
	var want []netip.AddrPort
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Logf("no %s here: %v", addr, err)
			continue
		}
		t.Cleanup(func() { _ = ln.Close() })
		want = append(want, ln.Addr().(*net.TCPAddr).AddrPort())
	}
	// A connected socket is not a listener.
	conn, err := net.Dial("tcp", want[0].String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	got, err := procfs.ListeningTCP(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("ListeningTCP(self) = %v, lacks %v", got, w)
		}
	}
	local := conn.LocalAddr().(*net.TCPAddr).AddrPort()
	if slices.Contains(got, local) {
		t.Errorf("ListeningTCP(self) = %v holds the client side %v of a connection", got, local)
	}
}

func TestChildrenNamesAChildUntilItIsGone(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if got := procfs.Children(os.Getpid()); !slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("Children(self) = %v, lacks the child %d", got, cmd.Process.Pid)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if got := procfs.Children(os.Getpid()); slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("Children(self) = %v after the child was reaped", got)
	}
}

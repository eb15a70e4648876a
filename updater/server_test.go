package updater_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/updater"
)

// fakeApt writes stand-ins for apt-get, dpkg and dpkg-query (shell scripts:
// these tests check the records and the socket, the real apt runs in
// TestSystemUpgradeInADebianRoot). apt-get full-upgrade moves the package
// "demo" from 1 to 2 and, while the file block exists, waits on the FIFO
// release first. Every call is appended to calls.
type fakeApt struct {
	dir, calls, block, release string
}

func newFakeApt(t *testing.T) fakeApt {
	t.Helper()
	d := t.TempDir()
	f := fakeApt{dir: d, calls: filepath.Join(d, "calls"), block: filepath.Join(d, "block"), release: filepath.Join(d, "release")}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(d, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(d, "version"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	write("apt-get", `echo "apt-get $*" >> `+f.calls+`
case "$*" in *full-upgrade*)
  if [ -e `+f.block+` ]; then read x < `+f.release+`; fi
  echo "Setting up demo (2) ..."; echo 2 > `+d+`/version;;
esac
`)
	write("dpkg", `echo "dpkg $*" >> `+f.calls+"\n")
	write("dpkg-query", `printf 'demo\t%s\tii \ngone\t1\trc \n' "$(cat `+d+`/version)"`+"\n")
	return f
}

func (f fakeApt) apt() updater.Apt {
	return updater.Apt{AptGet: filepath.Join(f.dir, "apt-get"), Dpkg: filepath.Join(f.dir, "dpkg"), DpkgQuery: filepath.Join(f.dir, "dpkg-query")}
}

func (f fakeApt) upgrades(t *testing.T) int {
	b, err := os.ReadFile(f.calls)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Count(string(b), "full-upgrade")
}

// startUpdater runs the updater in this process until the returned stop is
// called (or the test ends) and waits until its socket answers.
func startUpdater(t *testing.T, o updater.Options) (updater.Client, func()) {
	t.Helper()
	return startUpdaterWithGroup(t, o, -1)
}

// startUpdaterWithGroup is startUpdater with the socket's group gid (-1:
// none, mode 0600).
func startUpdaterWithGroup(t *testing.T, o updater.Options, gid int) (updater.Client, func()) {
	t.Helper()
	if o.Socket == "" {
		o.Socket = filepath.Join(t.TempDir(), "updater.sock")
	}
	if o.StateDir == "" {
		o.StateDir = t.TempDir()
	}
	o.SocketGID = gid
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- updater.Run(ctx, o) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("updater.Run: %v", err)
		}
	}
	t.Cleanup(stop)
	testenv.Eventually(t, "the updater's socket", 10*time.Second, func() bool {
		c, err := net.Dial("unix", o.Socket)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	return updater.Client{Socket: o.Socket}, stop
}

func waitDone(t *testing.T, c updater.Client, id string) updater.Response {
	t.Helper()
	var last updater.Response
	testenv.Eventually(t, "task "+id+" done", 30*time.Second, func() bool {
		r, err := c.Status(context.Background(), id)
		last = r
		return err == nil && r.Done()
	})
	return last
}

func TestASystemUpgradeRunsOncePerTaskIDAcrossRestarts(t *testing.T) {
	apt := newFakeApt(t)
	state := t.TempDir()
	o := updater.Options{AllowedUID: uint32(os.Getuid()), StateDir: state, Apt: apt.apt()}
	c, stop := startUpdater(t, o)
	ctx := context.Background()

	r, err := c.Start(ctx, "task-1", updater.OpSystemUpgrade, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Phase != events.TaskRunning && !r.Done() {
		t.Fatalf("phase %q, want Running or done", r.Phase)
	}
	done := waitDone(t, c, "task-1")
	if done.Phase != events.TaskSucceeded {
		t.Fatalf("phase %s, error %q", done.Phase, done.Error)
	}
	if d := cmp.Diff([]events.PackageChange{{Package: "demo", From: "1", To: "2"}}, done.Changes); d != "" {
		t.Errorf("changes (-want +got):\n%s", d)
	}
	if !strings.Contains(done.Output, "Setting up demo (2)") || !strings.Contains(done.Output, "dpkg --force-confold --force-confdef --configure -a") {
		t.Errorf("output lacks the commands' output:\n%s", done.Output)
	}
	stop()

	c, _ = startUpdater(t, o)
	again, err := c.Start(ctx, "task-1", updater.OpSystemUpgrade, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(done, again); d != "" {
		t.Errorf("the repeated request after a restart did not get the stored result (-first +again):\n%s", d)
	}
	if n := apt.upgrades(t); n != 1 {
		t.Errorf("full-upgrade ran %d times, want once", n)
	}
	if _, err := c.Status(ctx, "task-never"); !errors.Is(err, updater.ErrUnknownTask) {
		t.Errorf("status of an unknown id: %v, want ErrUnknownTask", err)
	}
}

func TestOneTaskRunsAtATime(t *testing.T) {
	apt := newFakeApt(t)
	if err := os.WriteFile(apt.block, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := mkfifo(apt.release); err != nil {
		t.Fatal(err)
	}
	c, _ := startUpdater(t, updater.Options{AllowedUID: uint32(os.Getuid()), Apt: apt.apt()})
	ctx := context.Background()
	if _, err := c.Start(ctx, "first", updater.OpSystemUpgrade, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "full-upgrade to start", 10*time.Second, func() bool { return apt.upgrades(t) == 1 })

	tests := []struct {
		name      string
		id        string
		wantBusy  bool
		wantPhase string
	}{
		{"another task id is told the updater is busy", "second", true, ""},
		{"the same task id gets the running state", "first", false, events.TaskRunning},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.Start(ctx, tc.id, updater.OpSystemUpgrade, nil)
			if got := errors.Is(err, updater.ErrBusy); got != tc.wantBusy {
				t.Fatalf("busy = %v (err %v), want %v", got, err, tc.wantBusy)
			}
			if r.Phase != tc.wantPhase {
				t.Errorf("phase %q, want %q", r.Phase, tc.wantPhase)
			}
		})
	}
	if err := os.WriteFile(apt.release, []byte("go\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := waitDone(t, c, "first"); r.Phase != events.TaskSucceeded {
		t.Fatalf("phase %s: %s", r.Phase, r.Error)
	}
	if _, err := c.Status(ctx, "second"); !errors.Is(err, updater.ErrUnknownTask) {
		t.Errorf("the refused task has a record: %v", err)
	}
}

func TestTheSocketServesOnlyTheAllowedUser(t *testing.T) {
	me := uint32(os.Getuid())
	tests := []struct {
		name    string
		allowed uint32
		wantErr error
	}{
		{"a peer with the allowed uid is served", me, nil},
		{"a peer with another uid is refused", me + 4242, updater.ErrPeerRefused},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := startUpdater(t, updater.Options{AllowedUID: tc.allowed, Apt: newFakeApt(t).apt()})
			err := c.Hello(context.Background(), "1.0.0")
			if !errors.Is(err, tc.wantErr) && !(err == nil && tc.wantErr == nil) {
				t.Fatalf("hello: %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestPeerUIDIsTheConnectingProcesssUID(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := updater.PeerUID(s)
	if err != nil {
		t.Fatal(err)
	}
	if got != uint32(os.Getuid()) {
		t.Errorf("peer uid %d, want %d", got, os.Getuid())
	}
}

func TestRawHostileRequestsAreRefusedAndTheUpdaterKeepsServing(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "u.sock")
	c, _ := startUpdater(t, updater.Options{Socket: sock, AllowedUID: uint32(os.Getuid()), Apt: newFakeApt(t).apt()})
	tests := []struct {
		name string
		raw  string
	}{
		{"an unknown op", `{"v":1,"id":"a","op":"shell"}`},
		{"an extra field", `{"v":1,"id":"a","op":"system-upgrade","packages":["x"]}`},
		{"an oversized request", `{"v":1,"id":"a","op":"status","pad":"` + strings.Repeat("x", 2*updater.MaxRequestSize) + `"}`},
		{"not JSON", "\x00\xff garbage"},
		{"a status with a second op that asks for an upgrade", `{"v":1,"id":"a","op":"status","op":"system-upgrade"}`},
		{"an op key in upper case", `{"v":1,"id":"a","OP":"system-upgrade"}`},
		{"a second url in the agent", `{"v":1,"id":"a","op":"agent-upgrade","agent":{"url":"https://a.example/x","url":"https://b.example/x","sha256":"` + sum + `","version":"1"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name+" is refused as invalid", func(t *testing.T) {
			conn, err := net.Dial("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = conn.Write([]byte(tc.raw))
			_ = conn.(*net.UnixConn).CloseWrite()
			b := make([]byte, 4096)
			n, _ := conn.Read(b)
			if !strings.Contains(string(b[:n]), `"code":"invalid"`) {
				t.Errorf("answer %q, want code invalid", b[:n])
			}
		})
	}
	if err := c.Hello(context.Background(), "1"); err != nil {
		t.Fatalf("the updater stopped serving: %v", err)
	}
}

func TestPeersHoldingConnectionsOpenCannotStarveTheAgentForLong(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "u.sock")
	c, _ := startUpdater(t, updater.Options{Socket: sock, AllowedUID: uint32(os.Getuid()), Apt: newFakeApt(t).apt()})
	var held []net.Conn
	for range 16 {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	// Beyond the bound a connection is closed unanswered.
	testenv.Eventually(t, "a connection beyond the bound to be closed", 10*time.Second, func() bool {
		conn, err := net.Dial("unix", sock)
		if err != nil {
			return false
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		_, _ = conn.Write([]byte(`{"v":1,"op":"hello","version":"1"}`))
		_ = conn.(*net.UnixConn).CloseWrite()
		b := make([]byte, 64)
		n, _ := conn.Read(b)
		return n == 0
	})
	for _, h := range held {
		_ = h.Close()
	}
	testenv.Eventually(t, "the updater to serve again", 10*time.Second, func() bool {
		return c.Hello(context.Background(), "1") == nil
	})
}

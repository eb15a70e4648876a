package dev_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/dev"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// guideUser is the normal user the tests create (as root) to run the
// getting-started guide as: its home keeps its rootless Podman storage
// and its Go caches between runs.
const guideUser = "fleet-guide"

// osUser is a user of this machine the tests run commands as.
type osUser struct {
	name             string
	uid, gid         uint32
	home, runtimeDir string
	// self: the test process's own user (no credential switch).
	self bool
}

// attr is the SysProcAttr that runs a command as u (nil for the test's
// own user): its own process group, so its children are stopped with it.
func (u *osUser) attr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if !u.self {
		a.Credential = &syscall.Credential{Uid: u.uid, Gid: u.gid}
	}
	return a
}

// env is a login environment of u: the system PATH, its HOME, USER and
// XDG_RUNTIME_DIR, then extra.
func (u *osUser) env(extra ...string) []string {
	return append([]string{"PATH=" + systemPATH, "HOME=" + u.home, "USER=" + u.name, "LOGNAME=" + u.name,
		"XDG_RUNTIME_DIR=" + u.runtimeDir, "LANG=C.UTF-8"}, extra...)
}

// run runs a command as u and returns its combined output.
func (u *osUser) run(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr, cmd.Env, cmd.Dir = u.attr(), env, u.home
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s as %s: %w\n%s", name, strings.Join(args, " "), u.name, err, out)
	}
	return string(out), nil
}

// mkdir makes dir owned by u (mode 0700).
func (u *osUser) mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if !u.self {
		if err := os.Chown(dir, int(u.uid), int(u.gid)); err != nil {
			t.Fatal(err)
		}
	}
}

// normalUser is the user to run the guide as a normal user: the test's own
// when it is not root; else guideUser, created when missing, as `useradd`
// makes a user on Debian (a home, subordinate ids for rootless Podman),
// with a runtime folder /run/user/<uid> as a login gives it.
func normalUser(t *testing.T) *osUser {
	t.Helper()
	if os.Geteuid() != 0 {
		cur, err := user.Current()
		if err != nil {
			t.Fatal(err)
		}
		rt := os.Getenv("XDG_RUNTIME_DIR")
		if rt == "" {
			testenv.Missing(t, "XDG_RUNTIME_DIR (a login session's runtime folder, for the rootless Podman socket)", "log in again, or export XDG_RUNTIME_DIR=/run/user/$(id -u)", errors.New("XDG_RUNTIME_DIR is not set"))
		}
		return &osUser{name: cur.Username, uid: uint32(os.Getuid()), gid: uint32(os.Getgid()), home: cur.HomeDir, runtimeDir: rt, self: true}
	}
	if _, err := user.Lookup(guideUser); err != nil {
		if out, err := exec.Command("useradd", "--create-home", "--user-group", "--shell", "/bin/bash", guideUser).CombinedOutput(); err != nil {
			t.Fatalf("useradd %s: %v\n%s", guideUser, err, out)
		}
	}
	lu, err := user.Lookup(guideUser)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(lu.Uid)
	gid, _ := strconv.Atoi(lu.Gid)
	u := &osUser{name: guideUser, uid: uint32(uid), gid: uint32(gid), home: lu.HomeDir, runtimeDir: "/run/user/" + lu.Uid}
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		b, _ := os.ReadFile(f)
		if !strings.Contains("\n"+string(b), "\n"+guideUser+":") {
			flag := map[string]string{"/etc/subuid": "--add-subuids", "/etc/subgid": "--add-subgids"}[f]
			if out, err := exec.Command("usermod", flag, "300000-365535", guideUser).CombinedOutput(); err != nil {
				t.Fatalf("usermod %s %s: %v\n%s", flag, guideUser, err, out)
			}
		}
	}
	u.mkdir(t, u.runtimeDir)
	return u
}

// rootlessPodman starts u's rootless Podman API service on the socket a
// login's podman.socket unit serves, $XDG_RUNTIME_DIR/podman/podman.sock
// (fleet dev's default), and makes sure u's storage has the base image
// `task setup:podman` imports; the service stops with the test. It returns
// the socket's path.
func rootlessPodman(t *testing.T, u *osUser) string {
	t.Helper()
	if fi, err := os.Stat("/dev/net/tun"); err != nil || fi.Mode().Perm()&0o006 != 0o006 {
		testenv.Missing(t, "/dev/net/tun usable by every user (rootless Podman's network, slirp4netns)", dev.SetupPodmanCommand,
			fmt.Errorf("/dev/net/tun: %v (mode %v)", err, fi))
	}
	if _, err := exec.LookPath("slirp4netns"); err != nil {
		testenv.Missing(t, "slirp4netns (rootless Podman's network)", dev.SetupPodmanCommand, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env := u.env()
	if _, err := u.run(ctx, env, "podman", "image", "exists", dev.BaseImage); err != nil {
		// As `task setup:podman` does for the user who runs it: the base
		// image in the user's own storage.
		dir := filepath.Join(u.home, ".cache", "fleet-base-image")
		u.mkdir(t, dir)
		tar := filepath.Join(dir, "base.tar")
		if out, err := exec.CommandContext(ctx, "podman", "save", "--format", "oci-archive", "-o", tar, dev.BaseImage).CombinedOutput(); err != nil {
			t.Fatalf("podman save %s: %v\n%s", dev.BaseImage, err, out)
		}
		_ = os.Chown(tar, int(u.uid), int(u.gid))
		if _, err := u.run(ctx, env, "podman", "load", "-i", tar); err != nil {
			t.Fatal(err)
		}
		if _, err := u.run(ctx, env, "podman", "tag", dev.BaseImage, dev.BaseImage); err != nil {
			t.Fatal(err)
		}
		os.RemoveAll(dir)
	}
	sockDir := filepath.Join(u.runtimeDir, "podman")
	u.mkdir(t, sockDir)
	sock := filepath.Join(sockDir, "podman.sock")
	_ = os.Remove(sock)
	logs := &testenv.SyncBuffer{}
	cmd := exec.Command("podman", "system", "service", "--time=0", "unix://"+sock)
	cmd.SysProcAttr, cmd.Env, cmd.Dir = u.attr(), env, u.home
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	exited := func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
			return false
		}
	}
	t.Cleanup(func() {
		// The test's containers on u's engine (its own user: every one).
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer ccancel()
		if _, err := u.run(cctx, env, "podman", "rm", "--all", "--force", "--time", "0"); err != nil {
			t.Errorf("remove %s's containers: %v", u.name, err)
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	if err := testenv.PollErr(ctx, time.Minute, func() error {
		if exited() {
			return fmt.Errorf("podman system service as %s exited", u.name)
		}
		resp, err := hc.Get("http://d/_ping")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("_ping: %s", resp.Status)
		}
		return nil
	}); err != nil {
		t.Fatalf("%s's rootless Podman service on %s: %v\n%s", u.name, sock, err, logs.String())
	}
	return sock
}

// goProxy serves the test process's Go module download cache as a module
// proxy on loopback, for a user who cannot read it: that user's go then
// builds offline from the same modules.
func goProxy(t *testing.T, goBin string) string {
	t.Helper()
	out, err := exec.Command(goBin, "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "cache", "download")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

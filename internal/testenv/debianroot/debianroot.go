// Package debianroot runs tests against a real Debian 12 root under the
// real Podman of podmantest: it imports the root (.cache/fresh-debian/
// bookworm.tar, made with mmdebstrap when missing) once as the image
// Image, builds dpkg-deb test packages into a flat local repository, and
// starts containers of the root with host folders mounted, in which tests
// exec commands as any user, query dpkg and kill the container.
//
// Only tests import this package (internal/hygiene checks). Its containers
// carry podmantest's labels, so podmantest.Connect removes them when the
// test ends; the image stays, for the next run.
package debianroot

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/api/handlers"
	"github.com/containers/podman/v5/pkg/bindings/containers"
	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/specgen"
	dockerContainer "github.com/docker/docker/api/types/container"
	spec "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// Image is the real Debian 12 root (mmdebstrap, .cache/fresh-debian/
// bookworm.tar) imported into the Podman service. It is shared by every
// test and kept between runs.
const Image = "localhost/fleet-debian-test:12"

// Connect connects to the Podman service (podmantest.Connect: a missing
// service fails in CI and skips elsewhere) and makes sure Image exists:
// it imports the cached tarball, or makes the tarball first with
// mmdebstrap (the recipe of scripts/check-fresh-debian.sh) when it is
// missing, or fails the test naming the fix.
func Connect(tb testing.TB) context.Context {
	tb.Helper()
	ctx := podmantest.Connect(tb)
	if ok, err := images.Exists(ctx, Image, nil); err == nil && ok {
		return ctx
	}
	root, err := podmantest.RepoRoot()
	if err != nil {
		tb.Fatal(err)
	}
	tarball := filepath.Join(root, ".cache", "fresh-debian", "bookworm.tar")
	if _, err := os.Stat(tarball); err != nil {
		makeTarball(tb, tarball)
	}
	f, err := os.Open(tarball)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if _, err := images.Import(ctx, f, new(images.ImportOptions).WithReference(Image)); err != nil {
		tb.Fatalf("import %s as %s: %v", tarball, Image, err)
	}
	return ctx
}

// makeTarball writes the Debian root with mmdebstrap from the machine's
// configured Debian mirror.
func makeTarball(tb testing.TB, tarball string) {
	tb.Helper()
	mm, err := exec.LookPath("mmdebstrap")
	if err != nil {
		tb.Fatalf("%s is missing and mmdebstrap is not installed: run scripts/check-fresh-debian.sh as root (it installs mmdebstrap and makes it), or apt-get install -y mmdebstrap, then\n"+
			"mmdebstrap --variant=apt --mode=root bookworm %s \"$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)\"", tarball, tarball)
	}
	mirror, err := exec.Command("awk", "/^URIs:/ {print $2; exit}", "/etc/apt/sources.list.d/debian.sources").Output()
	if err != nil || len(bytes.TrimSpace(mirror)) == 0 {
		tb.Fatalf("%s is missing and no Debian mirror is configured in /etc/apt/sources.list.d/debian.sources", tarball)
	}
	if err := os.MkdirAll(filepath.Dir(tarball), 0o755); err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command(mm, "--variant=apt", "--mode=root", "bookworm", tarball, string(bytes.TrimSpace(mirror))).CombinedOutput(); err != nil {
		tb.Fatalf("mmdebstrap: %v\n%s", err, out)
	}
}

// Options describe a container of Image.
type Options struct {
	// Name prefixes the container's name; a random suffix makes it unique.
	Name string
	// Command is the container's main process.
	Command []string
	// ReadOnly mounts host folders (host path → container path) read-only.
	ReadOnly map[string]string
	// HostNetwork shares the host's network, so processes in the container
	// reach servers the test listens on at 127.0.0.1; without it the
	// container has no network.
	HostNetwork bool
	// Init runs Podman's init as PID 1: it reaps orphans, so a process a
	// script started in the background and killed does not linger as a
	// zombie.
	Init bool
}

// Container is a container of Image, removed when the test ends.
type Container struct {
	// ID and Name are Podman's.
	ID, Name string

	tb  testing.TB
	ctx context.Context
}

// Create creates a container of Image (not started) labelled for tb.
func Create(tb testing.TB, ctx context.Context, o Options) *Container {
	tb.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	s := specgen.NewSpecGenerator(Image, false)
	s.Name = o.Name + "-" + hex.EncodeToString(b)
	s.Labels = podmantest.Labels(tb)
	s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	if o.HostNetwork {
		s.NetNS = specgen.Namespace{NSMode: specgen.Host}
	}
	if o.Init {
		s.Init = &o.Init
	}
	s.Command = o.Command
	for host, dest := range o.ReadOnly {
		s.Mounts = append(s.Mounts, spec.Mount{Type: "bind", Source: host, Destination: dest, Options: []string{"rbind", "ro"}})
	}
	resp, err := containers.CreateWithSpec(ctx, s, nil)
	if err != nil {
		tb.Fatalf("create %s: %v", s.Name, err)
	}
	return &Container{ID: resp.ID, Name: s.Name, tb: tb, ctx: ctx}
}

// For returns c failing t instead (for subtests).
func (c *Container) For(t testing.TB) *Container {
	d := *c
	d.tb = t
	return &d
}

// Start starts the container and waits until path exists in it (empty:
// does not wait), for at most timeout.
func (c *Container) Start(path string, timeout time.Duration) {
	c.tb.Helper()
	if err := containers.Start(c.ctx, c.ID, nil); err != nil {
		c.tb.Fatalf("start %s: %v", c.Name, err)
	}
	if path == "" {
		return
	}
	if err := testenv.Poll(c.ctx, timeout, func() bool {
		_, code, err := c.Try("root", "test", "-e", path)
		return err == nil && code == 0
	}); err != nil {
		c.tb.Fatalf("%s did not appear in %s within %s", path, c.Name, timeout)
	}
}

// Kill kills the container (SIGKILL) and waits until it stopped.
func (c *Container) Kill() {
	c.tb.Helper()
	if err := containers.Kill(c.ctx, c.ID, new(containers.KillOptions).WithSignal("SIGKILL")); err != nil {
		c.tb.Fatal(err)
	}
	testenv.Eventually(c.tb, "the container to stop", time.Minute, func() bool {
		in, err := containers.Inspect(c.ctx, c.ID, nil)
		return err == nil && !in.State.Running
	})
}

// Exec runs argv in the container as user and returns its output (stdout
// and stderr) and exit code.
func (c *Container) Exec(user string, argv ...string) (string, int) {
	c.tb.Helper()
	out, code, err := c.Try(user, argv...)
	if err != nil {
		c.tb.Fatal(err)
	}
	return out, code
}

// Try is Exec for any goroutine: it returns an error instead of failing
// the test.
func (c *Container) Try(user string, argv ...string) (string, int, error) {
	sid, err := containers.ExecCreate(c.ctx, c.ID, &handlers.ExecCreateConfig{ExecOptions: dockerContainer.ExecOptions{
		Cmd: argv, User: user, AttachStdout: true, AttachStderr: true}})
	if err != nil {
		return "", 0, fmt.Errorf("exec %v: %w", argv, err)
	}
	var buf testenv.SyncBuffer
	var w io.Writer = &buf
	if err := containers.ExecStartAndAttach(c.ctx, sid, new(containers.ExecStartAndAttachOptions).
		WithOutputStream(w).WithErrorStream(w).WithAttachOutput(true).WithAttachError(true)); err != nil {
		return "", 0, fmt.Errorf("exec %v: %w", argv, err)
	}
	var code int
	if err := testenv.Poll(c.ctx, 30*time.Second, func() bool {
		in, err := containers.ExecInspect(c.ctx, sid, nil)
		if err != nil || in.Running {
			return false
		}
		code = in.ExitCode
		return true
	}); err != nil {
		return "", 0, fmt.Errorf("exec %v did not end: %w", argv, err)
	}
	return buf.String(), code, nil
}

// Must runs argv as root and fails the test unless it exits 0.
func (c *Container) Must(argv ...string) string {
	c.tb.Helper()
	out, code := c.Exec("root", argv...)
	if code != 0 {
		c.tb.Fatalf("%v exited %d:\n%s", argv, code, out)
	}
	return out
}

// Package returns dpkg's "<status> <version>" of pkg ("install ok
// installed 2"), or what dpkg-query says when it does not know it.
func (c *Container) Package(pkg string) string {
	c.tb.Helper()
	out, _ := c.Exec("root", "dpkg-query", "-W", "-f", "${Status} ${Version}", pkg)
	return strings.TrimSpace(out)
}

// UseRepo makes the flat repository mounted at dir the container's only
// apt source and installs pkgs ("name=version").
func (c *Container) UseRepo(dir string, pkgs ...string) {
	c.tb.Helper()
	c.Must("sh", "-c", "rm -f /etc/apt/sources.list.d/* && echo 'deb [trusted=yes] file:"+dir+" ./' > /etc/apt/sources.list && "+
		"apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "+strings.Join(pkgs, " "))
}

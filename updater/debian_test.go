// The Podman bindings build only with the project's tags (remote
// exclude_graphdriver_btrfs containers_image_openpgp, as every test run
// passes them); without them this file is left out and the rest of the
// package's tests still build.

//go:build remote

package updater_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/updater"
)

// DebianImage is the real Debian 12 root (mmdebstrap, .cache/fresh-debian/
// bookworm.tar) imported into the Podman service.
const DebianImage = "localhost/fleet-debian-test:12"

// debianImage imports the cached Debian root once; a missing tarball is
// made with mmdebstrap, or the test fails naming the fix.
func debianImage(t *testing.T, ctx context.Context) {
	t.Helper()
	if ok, err := images.Exists(ctx, DebianImage, nil); err == nil && ok {
		return
	}
	root, err := podmantest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(root, ".cache", "fresh-debian", "bookworm.tar")
	if _, err := os.Stat(tarball); err != nil {
		mm, lerr := exec.LookPath("mmdebstrap")
		if lerr != nil {
			t.Fatalf("%s is missing and mmdebstrap is not installed: run scripts/check-fresh-debian.sh as root (it installs mmdebstrap and makes it), or apt-get install -y mmdebstrap, then\n"+
				"mmdebstrap --variant=apt --mode=root bookworm %s \"$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources)\"", tarball, tarball)
		}
		mirror, merr := exec.Command("awk", "/^URIs:/ {print $2; exit}", "/etc/apt/sources.list.d/debian.sources").Output()
		if merr != nil || len(bytes.TrimSpace(mirror)) == 0 {
			t.Fatalf("%s is missing and no Debian mirror is configured in /etc/apt/sources.list.d/debian.sources", tarball)
		}
		if err := os.MkdirAll(filepath.Dir(tarball), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(mm, "--variant=apt", "--mode=root", "bookworm", tarball, string(bytes.TrimSpace(mirror))).CombinedOutput(); err != nil {
			t.Fatalf("mmdebstrap: %v\n%s", err, out)
		}
	}
	f, err := os.Open(tarball)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := images.Import(ctx, f, new(images.ImportOptions).WithReference(DebianImage)); err != nil {
		t.Fatalf("import %s as %s: %v", tarball, DebianImage, err)
	}
}

// deb is a test package: name, version, and a postinst script (optional).
type deb struct {
	name, version, postinst string
}

// buildRepo writes the packages with dpkg-deb into dir and the Packages
// index of a flat repository (deb [trusted=yes] file:/repo ./).
func buildRepo(t *testing.T, dir string, pkgs ...deb) {
	t.Helper()
	dpkgDeb, err := exec.LookPath("dpkg-deb")
	if err != nil {
		t.Fatalf("dpkg-deb is needed to build the test packages: apt-get install -y dpkg (%v)", err)
	}
	var index bytes.Buffer
	for _, p := range pkgs {
		root := t.TempDir()
		must := func(err error) {
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755))
		must(os.MkdirAll(filepath.Join(root, "usr/share", p.name), 0o755))
		must(os.WriteFile(filepath.Join(root, "usr/share", p.name, "version"), []byte(p.version+"\n"), 0o644))
		control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: Harmony Fleet tests <tests@example.invalid>\nDescription: test package of the root updater\n", p.name, p.version)
		must(os.WriteFile(filepath.Join(root, "DEBIAN/control"), []byte(control), 0o644))
		if p.postinst != "" {
			must(os.WriteFile(filepath.Join(root, "DEBIAN/postinst"), []byte("#!/bin/sh\nset -e\n"+p.postinst), 0o755))
		}
		file := fmt.Sprintf("%s_%s_all.deb", p.name, p.version)
		if out, err := exec.Command(dpkgDeb, "--root-owner-group", "-b", root, filepath.Join(dir, file)).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb -b %s: %v\n%s", file, err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, file))
		must(err)
		sum := sha256.Sum256(b)
		fmt.Fprintf(&index, "%sFilename: ./%s\nSize: %d\nSHA256: %s\n\n", control, file, len(b), hex.EncodeToString(sum[:]))
	}
	if err := os.WriteFile(filepath.Join(dir, "Packages"), index.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// debian is a running container of DebianImage whose main process is the
// real fleet-updater, as root.
type debian struct {
	t   *testing.T
	ctx context.Context
	id  string
}

// exec runs argv in the container as user and returns its output and exit
// code.
func (d debian) exec(user string, argv ...string) (string, int) {
	d.t.Helper()
	out, code, err := d.try(user, argv...)
	if err != nil {
		d.t.Fatal(err)
	}
	return out, code
}

// try is exec for any goroutine: it returns an error instead of failing
// the test.
func (d debian) try(user string, argv ...string) (string, int, error) {
	sid, err := containers.ExecCreate(d.ctx, d.id, &handlers.ExecCreateConfig{ExecOptions: dockerContainer.ExecOptions{
		Cmd: argv, User: user, AttachStdout: true, AttachStderr: true}})
	if err != nil {
		return "", 0, fmt.Errorf("exec %v: %w", argv, err)
	}
	var buf testenv.SyncBuffer
	var w io.Writer = &buf
	if err := containers.ExecStartAndAttach(d.ctx, sid, new(containers.ExecStartAndAttachOptions).
		WithOutputStream(w).WithErrorStream(w).WithAttachOutput(true).WithAttachError(true)); err != nil {
		return "", 0, fmt.Errorf("exec %v: %w", argv, err)
	}
	var code int
	if err := testenv.Poll(d.ctx, 30*time.Second, func() bool {
		in, err := containers.ExecInspect(d.ctx, sid, nil)
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

// must runs argv as root and fails the test unless it exits 0.
func (d debian) must(argv ...string) string {
	d.t.Helper()
	out, code := d.exec("root", argv...)
	if code != 0 {
		d.t.Fatalf("%v exited %d:\n%s", argv, code, out)
	}
	return out
}

// ask sends a request with the real client as the fleet-agent user (or
// another) and decodes the updater's response.
func (d debian) ask(user string, args ...string) updater.Response {
	d.t.Helper()
	out, _ := d.exec(user, append([]string{"/opt/fleet/fleet-updater", "client", "--socket", "/run/fleet-updater/updater.sock"}, args...)...)
	var r updater.Response
	start := strings.Index(out, "{")
	if start < 0 || json.NewDecoder(strings.NewReader(out[start:])).Decode(&r) != nil {
		d.t.Fatalf("client %v answered no response:\n%s", args, out)
	}
	return r
}

// start starts the container and waits for the updater's socket.
func (d debian) start() {
	d.t.Helper()
	if err := containers.Start(d.ctx, d.id, nil); err != nil {
		d.t.Fatal(err)
	}
	testenv.Eventually(d.t, "the updater's socket in the container", 30*time.Second, func() bool {
		_, code := d.exec("root", "test", "-S", "/run/fleet-updater/updater.sock")
		return code == 0
	})
}

func (d debian) version(pkg string) string {
	d.t.Helper()
	out, _ := d.exec("root", "dpkg-query", "-W", "-f", "${Status} ${Version}", pkg)
	return strings.TrimSpace(out)
}

// TestSystemUpgradeInADebianRoot runs the real fleet-updater as root in a
// real Debian 12 root under Podman, asked by the real client as the
// fleet-agent user: apt really upgrades a package 1 → 2, a second run has
// nothing to do, and an updater killed in the middle of dpkg reports that
// task interrupted after its restart while the next run repairs dpkg
// (dpkg --configure -a) and succeeds.
func TestSystemUpgradeInADebianRoot(t *testing.T) {
	ctx := podmantest.Connect(t)
	debianImage(t, ctx)
	bin := buildBinary(t, "cmd/fleet-updater", "test")
	repo := t.TempDir()
	if err := os.Chmod(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	// fleet-upd-block 2's postinst waits while /block exists: dpkg is
	// mid-configure when the test kills the container.
	block := deb{name: "fleet-upd-block", version: "2", postinst: "touch /postinst-started\nwhile [ -e /block ]; do sleep 0.1; done\n"}
	buildRepo(t, repo, deb{name: "fleet-upd-demo", version: "1"}, deb{name: "fleet-upd-demo", version: "2"}, deb{name: "fleet-upd-block", version: "1"})

	s := specgen.NewSpecGenerator(DebianImage, false)
	s.Name = "fleet-upd-debian-" + randomName(t)
	s.Labels = podmantest.Labels(t)
	s.NetNS = specgen.Namespace{NSMode: specgen.NoNetwork}
	s.Command = []string{"/bin/sh", "-c", "id fleet-agent >/dev/null 2>&1 || useradd --system --user-group fleet-agent; " +
		"exec /opt/fleet/fleet-updater --socket /run/fleet-updater/updater.sock --state-dir /var/lib/fleet-updater " +
		"--allowed-user fleet-agent --socket-group fleet-agent --restart-command true --dpkg-lock-timeout 60s"}
	s.Mounts = []spec.Mount{
		{Type: "bind", Source: filepath.Dir(bin), Destination: "/opt/fleet", Options: []string{"rbind", "ro"}},
		{Type: "bind", Source: repo, Destination: "/repo", Options: []string{"rbind", "ro"}},
	}
	resp, err := containers.CreateWithSpec(ctx, s, nil)
	if err != nil {
		t.Fatalf("create %s: %v", s.Name, err)
	}
	d := debian{t: t, ctx: ctx, id: resp.ID}
	d.start()
	d.must("sh", "-c", "rm -f /etc/apt/sources.list.d/* && echo 'deb [trusted=yes] file:/repo ./' > /etc/apt/sources.list && "+
		"apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fleet-upd-demo=1 fleet-upd-block=1")
	if v := d.version("fleet-upd-demo"); v != "install ok installed 1" {
		t.Fatalf("fleet-upd-demo: %q", v)
	}

	t.Run("a user outside the agent's group cannot connect to the socket", func(t *testing.T) {
		d.t = t
		out, code := d.exec("nobody", "/opt/fleet/fleet-updater", "client", "--socket", "/run/fleet-updater/updater.sock", "--op", "status", "--id", "t0")
		if code == 0 || !strings.Contains(out, "permission denied") {
			t.Errorf("exit %d, output:\n%s\nwant permission denied", code, out)
		}
	})
	t.Run("another user of the agent's group is refused by its uid", func(t *testing.T) {
		d.t = t
		d.must("sh", "-c", "id intruder >/dev/null 2>&1 || useradd --system -G fleet-agent intruder")
		if r := d.ask("intruder", "--op", "system-upgrade", "--id", "t0"); r.Code != updater.CodeRefused {
			t.Errorf("response %+v, want code refused", r)
		}
		if r := d.ask("fleet-agent", "--op", "status", "--id", "t0"); r.Code != updater.CodeUnknownTask {
			t.Errorf("the refused request left a record: %+v", r)
		}
	})
	t.Run("a system-upgrade really upgrades the package 1 to 2 and reports the change", func(t *testing.T) {
		d.t = t
		r := d.ask("fleet-agent", "--op", "system-upgrade", "--id", "t1", "--wait", "5m")
		if r.Phase != events.TaskSucceeded {
			t.Fatalf("phase %s: %s\n%s", r.Phase, r.Error, r.Output)
		}
		if want := []events.PackageChange{{Package: "fleet-upd-demo", From: "1", To: "2"}}; fmt.Sprint(r.Changes) != fmt.Sprint(want) {
			t.Errorf("changes %+v, want %+v", r.Changes, want)
		}
		if v := d.version("fleet-upd-demo"); v != "install ok installed 2" {
			t.Errorf("dpkg-query says %q", v)
		}
		if !strings.Contains(r.Output, "full-upgrade") || len(r.Output) > events.MaxTaskOutput {
			t.Errorf("output (%d bytes) lacks the full-upgrade:\n%s", len(r.Output), r.Output)
		}
	})
	t.Run("a second system-upgrade finds nothing to do", func(t *testing.T) {
		d.t = t
		r := d.ask("fleet-agent", "--op", "system-upgrade", "--id", "t2", "--wait", "5m")
		if r.Phase != events.TaskSucceeded || len(r.Changes) != 0 {
			t.Errorf("phase %s, changes %+v, error %s", r.Phase, r.Changes, r.Error)
		}
	})
	t.Run("an updater killed mid-dpkg reports the task interrupted and the next run repairs dpkg", func(t *testing.T) {
		d.t = t
		buildRepo(t, repo, deb{name: "fleet-upd-demo", version: "2"}, deb{name: "fleet-upd-block", version: "1"}, block)
		d.must("touch", "/block")
		if r := d.ask("fleet-agent", "--op", "system-upgrade", "--id", "t3"); r.Phase != events.TaskRunning {
			t.Fatalf("response %+v, want Running", r)
		}
		testenv.Eventually(t, "the blocking postinst to run", 2*time.Minute, func() bool {
			_, code := d.exec("root", "test", "-e", "/postinst-started")
			return code == 0
		})
		if err := containers.Kill(ctx, d.id, new(containers.KillOptions).WithSignal("SIGKILL")); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "the container to stop", time.Minute, func() bool {
			in, err := containers.Inspect(ctx, d.id, nil)
			return err == nil && !in.State.Running
		})
		d.start()
		if v := d.version("fleet-upd-block"); !strings.Contains(v, "half-configured") && !strings.Contains(v, "unpacked") {
			t.Errorf("fleet-upd-block after the kill: %q, want half-configured or unpacked", v)
		}
		r := d.ask("fleet-agent", "--op", "status", "--id", "t3")
		if r.Phase != events.TaskFailed || !strings.Contains(r.Error, "interrupted") {
			t.Errorf("the killed task: %+v, want Failed interrupted", r)
		}
		again := d.ask("fleet-agent", "--op", "system-upgrade", "--id", "t3")
		if again.Phase != events.TaskFailed {
			t.Errorf("the killed task ran again: %+v", again)
		}
		d.must("rm", "/block")
		r = d.ask("fleet-agent", "--op", "system-upgrade", "--id", "t4", "--wait", "5m")
		if r.Phase != events.TaskSucceeded {
			t.Fatalf("phase %s: %s\n%s", r.Phase, r.Error, r.Output)
		}
		if !strings.Contains(r.Output, "--configure -a") || !strings.Contains(r.Output, "Setting up fleet-upd-block (2)") {
			t.Errorf("the repair is not in the output:\n%s", r.Output)
		}
		if v := d.version("fleet-upd-block"); v != "install ok installed 2" {
			t.Errorf("fleet-upd-block: %q", v)
		}
	})
	t.Run("a system-upgrade waits for the dpkg lock another apt holds", func(t *testing.T) {
		d.t = t
		buildRepo(t, repo, deb{name: "fleet-upd-demo", version: "2"}, block,
			deb{name: "fleet-upd-block", version: "3", postinst: block.postinst})
		d.must("sh", "-c", "rm -f /postinst-started && touch /block && apt-get update -qq")
		other := make(chan error, 1)
		go func() {
			// Another apt, holding the lock while its postinst waits.
			_, code, err := d.try("root", "sh", "-c", "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fleet-upd-block=3")
			if err == nil && code != 0 {
				err = fmt.Errorf("apt-get install exited %d", code)
			}
			other <- err
		}()
		testenv.Eventually(t, "the other apt's postinst to run", 2*time.Minute, func() bool {
			_, code := d.exec("root", "test", "-e", "/postinst-started")
			return code == 0
		})
		c := d.ask("fleet-agent", "--op", "system-upgrade", "--id", "t5")
		if c.Phase != events.TaskRunning {
			t.Fatalf("response %+v, want Running", c)
		}
		testenv.Eventually(t, "the updater to wait for the lock", time.Minute, func() bool {
			r := d.ask("fleet-agent", "--op", "status", "--id", "t5")
			return strings.Contains(r.Output, "dpkg is locked by another process")
		})
		d.must("rm", "/block")
		if err := <-other; err != nil {
			t.Fatalf("the other apt: %v", err)
		}
		r := d.ask("fleet-agent", "--op", "system-upgrade", "--id", "t5", "--wait", "5m")
		if r.Phase != events.TaskSucceeded {
			t.Fatalf("phase %s: %s\n%s", r.Phase, r.Error, r.Output)
		}
		if v := d.version("fleet-upd-block"); v != "install ok installed 3" {
			t.Errorf("fleet-upd-block: %q", v)
		}
	})
}

func randomName(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
}

// The Podman bindings build only with the project's tags (remote
// exclude_graphdriver_btrfs containers_image_openpgp, as every test run
// passes them); without them this file is left out and the rest of the
// package's tests still build.

//go:build remote

package updater_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/debianroot"
	"github.com/nationtech/harmony-fleet/updater"
)

// ask sends a request with the real client as user (the fleet-agent user,
// or another) in the container and decodes the updater's response.
func ask(t *testing.T, d *debianroot.Container, user string, args ...string) updater.Response {
	t.Helper()
	out, _ := d.Exec(user, append([]string{"/opt/fleet/fleet-updater", "client", "--socket", "/run/fleet-updater/updater.sock"}, args...)...)
	var r updater.Response
	start := strings.Index(out, "{")
	if start < 0 || json.NewDecoder(strings.NewReader(out[start:])).Decode(&r) != nil {
		t.Fatalf("client %v answered no response:\n%s", args, out)
	}
	return r
}

// TestSystemUpgradeInADebianRoot runs the real fleet-updater as root in a
// real Debian 12 root under Podman, asked by the real client as the
// fleet-agent user: apt really upgrades a package 1 → 2, a second run has
// nothing to do, and an updater killed in the middle of dpkg reports that
// task interrupted after its restart while the next run repairs dpkg
// (dpkg --configure -a) and succeeds.
func TestSystemUpgradeInADebianRoot(t *testing.T) {
	ctx := debianroot.Connect(t)
	bin := buildBinary(t, "cmd/fleet-updater", "test")
	repo := debianroot.NewRepo(t)
	// fleet-upd-block 2's postinst waits while /block exists: dpkg is
	// mid-configure when the test kills the container.
	block := debianroot.Package{Name: "fleet-upd-block", Version: "2", Postinst: "touch /postinst-started\nwhile [ -e /block ]; do sleep 0.1; done\n"}
	demo1, demo2 := debianroot.Package{Name: "fleet-upd-demo", Version: "1"}, debianroot.Package{Name: "fleet-upd-demo", Version: "2"}
	debianroot.WriteRepo(t, repo, demo1, demo2, debianroot.Package{Name: "fleet-upd-block", Version: "1"})

	d := debianroot.Create(t, ctx, debianroot.Options{
		Name: "fleet-upd-debian",
		Command: []string{"/bin/sh", "-c", "id fleet-agent >/dev/null 2>&1 || useradd --system --user-group fleet-agent; " +
			"exec /opt/fleet/fleet-updater --socket /run/fleet-updater/updater.sock --state-dir /var/lib/fleet-updater " +
			"--allowed-user fleet-agent --socket-group fleet-agent --restart-command true --dpkg-lock-timeout 60s"},
		ReadOnly: map[string]string{filepath.Dir(bin): "/opt/fleet", repo: "/repo"},
	})
	const sock = "/run/fleet-updater/updater.sock"
	d.Start(sock, 30*time.Second)
	d.UseRepo("/repo", "fleet-upd-demo=1", "fleet-upd-block=1")
	if v := d.Package("fleet-upd-demo"); v != "install ok installed 1" {
		t.Fatalf("fleet-upd-demo: %q", v)
	}

	t.Run("a user outside the agent's group cannot connect to the socket", func(t *testing.T) {
		d := d.For(t)
		out, code := d.Exec("nobody", "/opt/fleet/fleet-updater", "client", "--socket", "/run/fleet-updater/updater.sock", "--op", "status", "--id", "t0")
		if code == 0 || !strings.Contains(out, "permission denied") {
			t.Errorf("exit %d, output:\n%s\nwant permission denied", code, out)
		}
	})
	t.Run("another user of the agent's group is refused by its uid", func(t *testing.T) {
		d := d.For(t)
		d.Must("sh", "-c", "id intruder >/dev/null 2>&1 || useradd --system -G fleet-agent intruder")
		if r := ask(t, d, "intruder", "--op", "system-upgrade", "--id", "t0"); r.Code != updater.CodeRefused {
			t.Errorf("response %+v, want code refused", r)
		}
		if r := ask(t, d, "fleet-agent", "--op", "status", "--id", "t0"); r.Code != updater.CodeUnknownTask {
			t.Errorf("the refused request left a record: %+v", r)
		}
	})
	t.Run("a system-upgrade really upgrades the package 1 to 2 and reports the change", func(t *testing.T) {
		d := d.For(t)
		r := ask(t, d, "fleet-agent", "--op", "system-upgrade", "--id", "t1", "--wait", "5m")
		if r.Phase != events.TaskSucceeded {
			t.Fatalf("phase %s: %s\n%s", r.Phase, r.Error, r.Output)
		}
		if want := []events.PackageChange{{Package: "fleet-upd-demo", From: "1", To: "2"}}; fmt.Sprint(r.Changes) != fmt.Sprint(want) {
			t.Errorf("changes %+v, want %+v", r.Changes, want)
		}
		if v := d.Package("fleet-upd-demo"); v != "install ok installed 2" {
			t.Errorf("dpkg-query says %q", v)
		}
		if !strings.Contains(r.Output, "full-upgrade") || len(r.Output) > events.MaxTaskOutput {
			t.Errorf("output (%d bytes) lacks the full-upgrade:\n%s", len(r.Output), r.Output)
		}
	})
	t.Run("a second system-upgrade finds nothing to do", func(t *testing.T) {
		d := d.For(t)
		r := ask(t, d, "fleet-agent", "--op", "system-upgrade", "--id", "t2", "--wait", "5m")
		if r.Phase != events.TaskSucceeded || len(r.Changes) != 0 {
			t.Errorf("phase %s, changes %+v, error %s", r.Phase, r.Changes, r.Error)
		}
	})
	t.Run("an updater killed mid-dpkg reports the task interrupted and the next run repairs dpkg", func(t *testing.T) {
		d := d.For(t)
		debianroot.WriteRepo(t, repo, demo2, debianroot.Package{Name: "fleet-upd-block", Version: "1"}, block)
		d.Must("touch", "/block")
		if r := ask(t, d, "fleet-agent", "--op", "system-upgrade", "--id", "t3"); r.Phase != events.TaskRunning {
			t.Fatalf("response %+v, want Running", r)
		}
		testenv.Eventually(t, "the blocking postinst to run", 2*time.Minute, func() bool {
			_, code := d.Exec("root", "test", "-e", "/postinst-started")
			return code == 0
		})
		d.Kill()
		d.Start(sock, 30*time.Second)
		if v := d.Package("fleet-upd-block"); !strings.Contains(v, "half-configured") && !strings.Contains(v, "unpacked") {
			t.Errorf("fleet-upd-block after the kill: %q, want half-configured or unpacked", v)
		}
		r := ask(t, d, "fleet-agent", "--op", "status", "--id", "t3")
		if r.Phase != events.TaskFailed || !strings.Contains(r.Error, "interrupted") {
			t.Errorf("the killed task: %+v, want Failed interrupted", r)
		}
		again := ask(t, d, "fleet-agent", "--op", "system-upgrade", "--id", "t3")
		if again.Phase != events.TaskFailed {
			t.Errorf("the killed task ran again: %+v", again)
		}
		d.Must("rm", "/block")
		r = ask(t, d, "fleet-agent", "--op", "system-upgrade", "--id", "t4", "--wait", "5m")
		if r.Phase != events.TaskSucceeded {
			t.Fatalf("phase %s: %s\n%s", r.Phase, r.Error, r.Output)
		}
		if !strings.Contains(r.Output, "--configure -a") || !strings.Contains(r.Output, "Setting up fleet-upd-block (2)") {
			t.Errorf("the repair is not in the output:\n%s", r.Output)
		}
		if v := d.Package("fleet-upd-block"); v != "install ok installed 2" {
			t.Errorf("fleet-upd-block: %q", v)
		}
	})
	t.Run("a system-upgrade waits for the dpkg lock another apt holds", func(t *testing.T) {
		d := d.For(t)
		debianroot.WriteRepo(t, repo, demo2, block,
			debianroot.Package{Name: "fleet-upd-block", Version: "3", Postinst: block.Postinst})
		d.Must("sh", "-c", "rm -f /postinst-started && touch /block && apt-get update -qq")
		other := make(chan error, 1)
		go func() {
			// Another apt, holding the lock while its postinst waits.
			_, code, err := d.Try("root", "sh", "-c", "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fleet-upd-block=3")
			if err == nil && code != 0 {
				err = fmt.Errorf("apt-get install exited %d", code)
			}
			other <- err
		}()
		testenv.Eventually(t, "the other apt's postinst to run", 2*time.Minute, func() bool {
			_, code := d.Exec("root", "test", "-e", "/postinst-started")
			return code == 0
		})
		c := ask(t, d, "fleet-agent", "--op", "system-upgrade", "--id", "t5")
		if c.Phase != events.TaskRunning {
			t.Fatalf("response %+v, want Running", c)
		}
		testenv.Eventually(t, "the updater to wait for the lock", time.Minute, func() bool {
			r := ask(t, d, "fleet-agent", "--op", "status", "--id", "t5")
			return strings.Contains(r.Output, "dpkg is locked by another process")
		})
		d.Must("rm", "/block")
		if err := <-other; err != nil {
			t.Fatalf("the other apt: %v", err)
		}
		r := ask(t, d, "fleet-agent", "--op", "system-upgrade", "--id", "t5", "--wait", "5m")
		if r.Phase != events.TaskSucceeded {
			t.Fatalf("phase %s: %s\n%s", r.Phase, r.Error, r.Output)
		}
		if v := d.Package("fleet-upd-block"); v != "install ok installed 3" {
			t.Errorf("fleet-upd-block: %q", v)
		}
	})
}

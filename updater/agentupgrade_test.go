package updater_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/updater"
)

// TestAgentUpgradeKeepsAGoodAgentAndRestoresAfterABadOne runs the real
// fleet-updater (as this test's user, allowed on its socket) and real
// fleet-agent builds connected to a real NATS server; a shell script stands
// in for systemd (the daemon's --restart-command): it stops the agent it
// started and starts the executable the link points to. The agent asks
// the updater for the tasks of its intent. A good build (the real agent
// stamped v2-good) is activated and says hello with its version; a bad one
// (exits at start) is rolled back to the previous executable, restarted,
// and the task fails saying why; a download whose sha256 differs is never
// installed; an updater killed (SIGKILL) while it waits for the new agent's
// hello restores the previous executable when it starts again.
func TestAgentUpgradeKeepsAGoodAgentAndRestoresAfterABadOne(t *testing.T) {
	updaterBin := buildBinary(t, "cmd/fleet-updater", "test")
	v1 := buildBinary(t, "cmd/fleet-agent", "v1")
	v2 := buildBinary(t, "cmd/fleet-agent", "v2-good")
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad-agent")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho 'this agent cannot start' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	artifacts := map[string]string{"/v2-good": v2, "/v3-bad": bad}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := artifacts[r.URL.Path]; ok {
			http.ServeFile(w, r, p)
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(web.Close)

	srv, st := natstest.Provisioned(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}

	lib, link, sock := filepath.Join(dir, "lib"), filepath.Join(dir, "bin", "fleet-agent"), filepath.Join(dir, "run", "updater.sock")
	for _, d := range []string{lib, filepath.Dir(link)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(v1, link); err != nil {
		t.Fatal(err)
	}
	pidFile, agentLog := filepath.Join(dir, "agent.pid"), filepath.Join(dir, "agent.log")
	restart := filepath.Join(dir, "restart.sh")
	script := fmt.Sprintf(`#!/bin/sh
# systemctl restart fleet-agent, for the test: stop the agent, start the link.
if [ -f %[1]s ]; then
  pid=$(cat %[1]s)
  kill "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
fi
setsid %[2]s --device d1 --nats-url %[3]s --insecure-no-auth --runtime sim --heartbeat 1h --updater-socket %[4]s >>%[5]s 2>&1 </dev/null &
echo $! > %[1]s
`, pidFile, link, srv.ClientURL(), sock, agentLog)
	if err := os.WriteFile(restart, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if t.Failed() {
			b, _ := os.ReadFile(agentLog)
			t.Logf("agent log:\n%s", b)
		}
	})

	var updLog testenv.SyncBuffer
	startUpdater := func() *exec.Cmd {
		t.Helper()
		upd := exec.Command(updaterBin, "--socket", sock, "--socket-group", "", "--allowed-user", strconv.Itoa(os.Getuid()),
			"--state-dir", filepath.Join(dir, "state"), "--agent-link", link, "--agent-dir", lib,
			"--restart-command", "/bin/sh "+restart, "--health-timeout", "10s")
		upd.Stdout, upd.Stderr = &updLog, &updLog
		if err := upd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = upd.Process.Signal(syscall.SIGTERM)
			_ = upd.Wait()
		})
		return upd
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("updater log:\n%s", updLog.String())
		}
	})
	upd := startUpdater()
	testenv.Eventually(t, "the updater's socket", 10*time.Second, func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
	if out, err := exec.Command("/bin/sh", restart).CombinedOutput(); err != nil {
		t.Fatalf("start the agent: %v\n%s", err, out)
	}

	var tasks []events.TaskEntry
	put := func(e events.TaskEntry) {
		t.Helper()
		tasks = append(tasks, e)
		b, _ := json.Marshal(events.DeviceIntent{Device: "d1", Tasks: tasks})
		if _, err := kv.Put(ctx, "d1", b); err != nil {
			t.Fatal(err)
		}
	}
	final := func(uid string) events.TaskStatus {
		t.Helper()
		var got events.TaskStatus
		testenv.Eventually(t, "task "+uid+" to end", 2*time.Minute, func() bool {
			for r, err := range st.Replay(ctx, "fleet.report.d1.task", events.FromStart()) {
				if err != nil {
					return false
				}
				ts, err := events.Decode[events.TaskStatus](r.Event)
				if err == nil && ts.UID == uid && (ts.Phase == events.TaskSucceeded || ts.Phase == events.TaskFailed) {
					got = ts
					return true
				}
			}
			return false
		})
		return got
	}
	heartbeatVersion := func() string {
		rec, err := st.Last(ctx, "fleet.report.d1.heartbeat")
		if err != nil {
			return ""
		}
		hb, _ := events.Decode[events.DeviceHeartbeat](rec.Event)
		return hb.AgentVersion
	}
	testenv.Eventually(t, "agent v1 to report", time.Minute, func() bool { return heartbeatVersion() == "v1" })
	artifact := func(path, version string) *events.AgentArtifact {
		b, err := os.ReadFile(artifacts[path])
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		return &events.AgentArtifact{URL: web.URL + path, SHA256: hex.EncodeToString(sum[:]), Version: version}
	}
	linked := func() string {
		p, _ := os.Readlink(link)
		return p
	}

	t.Run("a good agent is installed beside the old one, activated, and reports its version", func(t *testing.T) {
		put(events.TaskEntry{Namespace: "lab", TaskRun: "agent-v2", UID: "up-good", Task: events.TaskAgentUpgrade, Agent: artifact("/v2-good", "v2-good")})
		got := final("up-good")
		if got.Phase != events.TaskSucceeded || got.AgentVersion != "v2-good" {
			t.Fatalf("status %+v", got)
		}
		if want := filepath.Join(lib, "fleet-agent-v2-good"); linked() != want {
			t.Errorf("the link points to %s, want %s", linked(), want)
		}
		if _, err := os.Stat(v1); err != nil {
			t.Errorf("the previous executable is gone: %v", err)
		}
		testenv.Eventually(t, "the new agent's heartbeat", time.Minute, func() bool { return heartbeatVersion() == "v2-good" })
	})
	t.Run("a bad agent is rolled back to the previous executable and the task says why", func(t *testing.T) {
		put(events.TaskEntry{Namespace: "lab", TaskRun: "agent-v3", UID: "up-bad", Task: events.TaskAgentUpgrade, Agent: artifact("/v3-bad", "v3-bad")})
		got := final("up-bad")
		if got.Phase != events.TaskFailed || !strings.Contains(got.Error, "did not report its version") || !strings.Contains(got.Error, "restored") {
			t.Fatalf("status %+v", got)
		}
		if got.AgentVersion != "v2-good" {
			t.Errorf("agent version after the restore %q, want v2-good", got.AgentVersion)
		}
		if want := filepath.Join(lib, "fleet-agent-v2-good"); linked() != want {
			t.Errorf("the link points to %s, want %s", linked(), want)
		}
	})
	t.Run("a download whose sha256 differs is never installed", func(t *testing.T) {
		a := artifact("/v2-good", "v4")
		a.SHA256 = strings.Repeat("0", 64)
		put(events.TaskEntry{Namespace: "lab", TaskRun: "agent-v4", UID: "up-sum", Task: events.TaskAgentUpgrade, Agent: a})
		got := final("up-sum")
		if got.Phase != events.TaskFailed || !strings.Contains(got.Error, "sha256 mismatch") {
			t.Fatalf("status %+v", got)
		}
		if _, err := os.Stat(filepath.Join(lib, "fleet-agent-v4")); err == nil {
			t.Error("the mismatching download was installed")
		}
		if want := filepath.Join(lib, "fleet-agent-v2-good"); linked() != want {
			t.Errorf("the link points to %s, want %s", linked(), want)
		}
	})
	t.Run("an updater killed while it waits for the new agent restores the previous one when it starts again", func(t *testing.T) {
		put(events.TaskEntry{Namespace: "lab", TaskRun: "agent-v5", UID: "up-kill", Task: events.TaskAgentUpgrade, Agent: artifact("/v3-bad", "v5-bad")})
		c := updater.Client{Socket: sock}
		testenv.Eventually(t, "the updater to wait for the new agent", time.Minute, func() bool {
			r, err := c.Status(ctx, "up-kill")
			return err == nil && strings.Contains(r.Output, "waiting up to")
		})
		if err := upd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		_ = upd.Wait()
		if want := filepath.Join(lib, "fleet-agent-v5-bad"); linked() != want {
			t.Fatalf("the link points to %s before the restart, want %s", linked(), want)
		}
		upd = startUpdater()
		got := final("up-kill")
		if got.Phase != events.TaskFailed || !strings.Contains(got.Error, "interrupted") || !strings.Contains(got.Error, "restored") {
			t.Fatalf("status %+v", got)
		}
		if want := filepath.Join(lib, "fleet-agent-v2-good"); linked() != want {
			t.Errorf("the link points to %s, want %s", linked(), want)
		}
	})
}

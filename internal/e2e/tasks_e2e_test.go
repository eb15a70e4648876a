package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/debianroot"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/operator"
)

// The device of the TaskRun test: where its parts live in the Debian root.
const (
	tasksNamespace  = "e2e-tasks"
	tasksAgentV1    = "v1-e2e"
	tasksAgentV2    = "v2-e2e"
	tasksAgentLib   = "/usr/local/lib/fleet-agent"
	tasksAgentLink  = "/usr/local/bin/fleet-agent"
	tasksUpdSocket  = "/run/fleet-updater/updater.sock"
	tasksAgentLog   = "/var/log/fleet-agent.log"
	tasksUpdaterLog = "/var/log/fleet-updater.log"
)

// tasksRestartScript stands in for `systemctl restart fleet-agent` (the
// updater's --restart-command): it stops the running agent and starts the
// executable the link points to as the fleet-agent user, with the
// device's key file and the updater's socket. %[1]s is the NATS URL, %[2]s
// the label selecting the device.
const tasksRestartScript = `#!/bin/sh
pidfile=/run/fleet-agent.pid
if [ -f "$pidfile" ]; then
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
fi
echo "== start $(readlink ` + tasksAgentLink + `)" >>` + tasksAgentLog + `
setsid setpriv --reuid fleet-agent --regid fleet-agent --init-groups ` + tasksAgentLink + ` \
  --key-file /etc/fleet/key.json --nats-url %[1]s --runtime sim --heartbeat 2s \
  --updater-socket ` + tasksUpdSocket + ` --label %[2]s >>` + tasksAgentLog + ` 2>&1 </dev/null &
echo $! > "$pidfile"
`

// tasksSetup runs as root when the container starts: the fleet-agent
// user, the agent v1 installed as the updater installs agents (an
// executable in the agent folder, the unit's link to it), the key file
// readable by the agent only; it starts the agent and then becomes the
// real fleet-updater.
const tasksSetup = `set -e
id fleet-agent >/dev/null 2>&1 || useradd --system --user-group fleet-agent
mkdir -p ` + tasksAgentLib + ` /etc/fleet
install -m 0755 /opt/fleet-agent-v1/fleet-agent ` + tasksAgentLib + `/fleet-agent-` + tasksAgentV1 + `
ln -sfn ` + tasksAgentLib + `/fleet-agent-` + tasksAgentV1 + ` ` + tasksAgentLink + `
install -o fleet-agent -g fleet-agent -m 0600 /opt/fleet-conf/key.json /etc/fleet/key.json
/bin/sh /opt/fleet-conf/restart.sh
exec /opt/fleet-updater/fleet-updater --socket ` + tasksUpdSocket + ` --state-dir /var/lib/fleet-updater \
  --allowed-user fleet-agent --socket-group fleet-agent --agent-link ` + tasksAgentLink + ` --agent-dir ` + tasksAgentLib + ` \
  --restart-command "/bin/sh /opt/fleet-conf/restart.sh" --health-timeout 20s --dpkg-lock-timeout 60s >>` + tasksUpdaterLog + ` 2>&1
`

// TestATaskRunAppliedWithKubectlUpgradesARealDebianRootAndABadAgentUpgradeIsRolledBack:
// a real API server, the NATS control plane with the auth callout and the
// operator; one container of the real Debian 12 root runs the real
// fleet-updater as root and the real fleet-agent (v1, static, --runtime
// sim) as the fleet-agent user, authenticated with its enrollment key file
// and talking to the updater over its socket. A system-upgrade TaskRun
// applied with kubectl upgrades a real package 1 → 2 with apt and its
// status says so; a second finds nothing to do; an agent-upgrade TaskRun
// to a build that exits at start, served over HTTP by the test, fails
// saying why, and the agent v1 runs again and reports its version; one to
// a good build (v2) succeeds and v2 reports its version.
func TestATaskRunAppliedWithKubectlUpgradesARealDebianRootAndABadAgentUpgradeIsRolledBack(t *testing.T) {
	start := time.Now()
	srv := kubeapi.Shared(t)
	pctx := debianroot.Connect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))

	updaterBin := debianroot.BuildBinary(t, "cmd/fleet-updater", "e2e")
	agentBin := debianroot.BuildBinary(t, "cmd/fleet-agent", tasksAgentV1)
	agentV2 := debianroot.BuildBinary(t, "cmd/fleet-agent", tasksAgentV2)
	repo := debianroot.NewRepo(t)
	debianroot.WriteRepo(t, repo, debianroot.Package{Name: "fleet-e2e-demo", Version: "1"}, debianroot.Package{Name: "fleet-e2e-demo", Version: "2"})

	// The agent builds, served over HTTP as releases would be.
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fleet-agent-bad":
			_, _ = w.Write([]byte(badAgent))
		case "/fleet-agent-" + tasksAgentV2:
			http.ServeFile(w, r, agentV2)
		default:
			http.NotFound(w, r)
		}
	}))
	defer web.Close()

	env := callouttest.Start(t)
	opCtx, stopOp := context.WithCancel(ctx)
	opDone := make(chan error, 1)
	go func() {
		opDone <- operator.Run(opCtx, operator.Options{RESTConfig: srv.RESTConfig(), Store: env.Store, Reader: env.Store, IntentKV: env.Intent,
			Devices: env.Store, Logger: logger, StatusInterval: 200 * time.Millisecond, SeveralPerProcess: true})
	}()
	defer func() { stopOp(); <-opDone }()

	kubectl := func(stdin string, args ...string) string {
		t.Helper()
		out, err := srv.Kubectl(ctx, []byte(stdin), args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	// TaskRuns carry the operator's finalizer: they go while it runs.
	defer func() {
		if out, err := srv.Kubectl(context.Background(), nil, "delete", "ftr", "--all", "-n", tasksNamespace, "--timeout=60s"); err != nil {
			t.Errorf("delete the TaskRuns: %v\n%s", err, out)
		}
	}()

	device := fmt.Sprintf("e2e-tasks-%d", os.Getpid())
	role := "role=" + device
	keyPath := env.EnrollDevice(t, device)
	key, err := credential.ReadKeyFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	conf := debianroot.NewRepo(t)
	if err := os.WriteFile(filepath.Join(conf, "restart.sh"), fmt.Appendf(nil, tasksRestartScript, env.NATS.ClientURL(), role), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(conf, "key.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}

	kubectl("", "create", "namespace", tasksNamespace)
	kubectl(fmt.Sprintf(`apiVersion: fleet.nationtech.io/v1alpha1
kind: Device
metadata: {name: %s}
spec: {identitySubject: %q}
`, device, key.UserID), "apply", "-n", tasksNamespace, "-f", "-")

	d := debianroot.Create(t, pctx, debianroot.Options{
		Name:        "fleet-e2e-tasks",
		Command:     []string{"/bin/sh", "-c", tasksSetup},
		ReadOnly:    map[string]string{filepath.Dir(updaterBin): "/opt/fleet-updater", filepath.Dir(agentBin): "/opt/fleet-agent-v1", conf: "/opt/fleet-conf", repo: "/repo"},
		HostNetwork: true, // the test's NATS, OpenID Provider and web server listen on 127.0.0.1
		Init:        true, // reaps the agents the restart script stops
	})
	// A defer, not a cleanup: the Podman context ends before cleanups run.
	defer func() {
		if t.Failed() {
			for _, f := range []string{tasksAgentLog, tasksUpdaterLog} {
				out, _, err := d.Try("root", "cat", f)
				t.Logf("%s (%v):\n%s", f, err, out)
			}
		}
	}()
	d.Start(tasksUpdSocket, time.Minute)
	d.UseRepo("/repo", "fleet-e2e-demo=1")
	if v := d.Package("fleet-e2e-demo"); v != "install ok installed 1" {
		t.Fatalf("fleet-e2e-demo before the TaskRun: %q", v)
	}
	// The agent's self-reported label reaches the Device through the
	// operator; the TaskRuns select on it, and freeze their targets when
	// created.
	waitObject(t, ctx, srv, tasksNamespace, "fdev/"+device, "get its self-reported role label", fieldIs(device, "metadata", "labels", "role"))
	waitObject(t, ctx, srv, tasksNamespace, "fdev/"+device, "report agent "+tasksAgentV1, fieldIs(tasksAgentV1, "status", "inventory", "agentVersion"))

	apply := func(name, task, agent string) {
		t.Helper()
		kubectl(fmt.Sprintf(`apiVersion: fleet.nationtech.io/v1alpha1
kind: TaskRun
metadata: {name: %s}
spec:
  task: %s
%s  targetSelector: {matchLabels: {role: %s}}
`, name, task, agent, device), "apply", "-n", tasksNamespace, "-f", "-")
	}
	// finished polls the TaskRun until its one target finished.
	finished := func(t *testing.T, name string) taskRun {
		t.Helper()
		var tr taskRun
		testenv.Eventually(t, "TaskRun "+name+" to finish", 5*time.Minute, func() bool {
			out, err := srv.Kubectl(ctx, nil, "get", "ftr", name, "-n", tasksNamespace, "-o", "json")
			if err != nil || json.Unmarshal(out, &tr) != nil {
				return false
			}
			s := tr.Status
			return s.Counts.Targets == 1 && s.Counts.Succeeded+s.Counts.Failed == 1 &&
				(s.Phase == "Succeeded" || s.Phase == "Failed")
		})
		if len(tr.Status.Results) != 1 || tr.Status.Results[0].Device != device {
			t.Fatalf("TaskRun %s results %+v, want one for %s", name, tr.Status.Results, device)
		}
		return tr
	}

	t.Run("a system-upgrade TaskRun upgrades the package 1 to 2 with apt and its status says so", func(t *testing.T) {
		apply("system-upgrade", "system-upgrade", "")
		tr := finished(t, "system-upgrade")
		r := tr.Status.Results[0]
		if tr.Status.Phase != "Succeeded" || r.Phase != events.TaskSucceeded || r.ChangedPackages != 1 {
			t.Errorf("status %+v, want Succeeded with 1 changed package", tr.Status)
		}
		if v := d.For(t).Package("fleet-e2e-demo"); v != "install ok installed 2" {
			t.Errorf("dpkg-query says %q, want version 2 installed", v)
		}
		got := taskReport(t, ctx, env.Store, device, tr.Metadata.UID)
		if want := []events.PackageChange{{Package: "fleet-e2e-demo", From: "1", To: "2"}}; fmt.Sprint(got.Changes) != fmt.Sprint(want) {
			t.Errorf("the device reported changes %+v, want %+v", got.Changes, want)
		}
	})
	t.Run("a second system-upgrade TaskRun finds nothing to do", func(t *testing.T) {
		apply("system-upgrade-again", "system-upgrade", "")
		tr := finished(t, "system-upgrade-again")
		if r := tr.Status.Results[0]; tr.Status.Phase != "Succeeded" || r.ChangedPackages != 0 {
			t.Errorf("status %+v, want Succeeded with no change", tr.Status)
		}
		if v := d.For(t).Package("fleet-e2e-demo"); v != "install ok installed 2" {
			t.Errorf("dpkg-query says %q", v)
		}
	})
	t.Run("an agent-upgrade TaskRun to a build that exits at start fails saying why and the previous agent runs again", func(t *testing.T) {
		d := d.For(t)
		before, _ := d.Exec("root", "cat", "/run/fleet-agent.pid")
		sum := sha256.Sum256([]byte(badAgent))
		apply("agent-bad", "agent-upgrade", fmt.Sprintf("  agent: {url: %q, sha256: %s, version: v2-bad}\n", web.URL+"/fleet-agent-bad", hex.EncodeToString(sum[:])))
		tr := finished(t, "agent-bad")
		failedAt := time.Now()
		r := tr.Status.Results[0]
		if tr.Status.Phase != "Failed" || r.Phase != events.TaskFailed {
			t.Fatalf("status %+v, want Failed", tr.Status)
		}
		for _, want := range []string{"did not report its version", "restored"} {
			if !strings.Contains(r.Message, want) || tr.Status.LatestFailure == nil || !strings.Contains(tr.Status.LatestFailure.Message, want) {
				t.Errorf("result message %q, latest failure %+v: want %q", r.Message, tr.Status.LatestFailure, want)
			}
		}
		if r.AgentVersion != tasksAgentV1 {
			t.Errorf("the result's agent version %q, want %s", r.AgentVersion, tasksAgentV1)
		}
		if link := strings.TrimSpace(d.Must("readlink", tasksAgentLink)); link != tasksAgentLib+"/fleet-agent-"+tasksAgentV1 {
			t.Errorf("the agent link points to %s after the rollback", link)
		}
		// The restored agent is a new process of the v1 executable, run by
		// the fleet-agent user, whose heartbeats say v1.
		after := strings.TrimSpace(d.Must("cat", "/run/fleet-agent.pid"))
		if after == strings.TrimSpace(before) {
			t.Errorf("the agent was not restarted (pid %s)", after)
		}
		// Only its own user may read the process's executable link.
		if exe, _ := d.Exec("fleet-agent", "readlink", "/proc/"+after+"/exe"); strings.TrimSpace(exe) != tasksAgentLib+"/fleet-agent-"+tasksAgentV1 {
			t.Errorf("the running agent (pid %s) is %q", after, exe)
		}
		if user := strings.TrimSpace(d.Must("stat", "-c", "%U", "/proc/"+after)); user != "fleet-agent" {
			t.Errorf("the running agent's user is %q", user)
		}
		testenv.Eventually(t, "a heartbeat of the restored agent", time.Minute, func() bool {
			rec, err := env.Store.Last(ctx, reportSubject(t, device, events.ReportHeartbeat))
			if err != nil || !rec.Stored.After(failedAt) {
				return false
			}
			hb, err := events.Decode[events.DeviceHeartbeat](rec.Event)
			return err == nil && hb.AgentVersion == tasksAgentV1
		})
		waitObject(t, ctx, srv, tasksNamespace, "fdev/"+device, "report agent "+tasksAgentV1, fieldIs(tasksAgentV1, "status", "inventory", "agentVersion"))
	})
	t.Run("an agent-upgrade TaskRun to a good build installs it beside the previous one and the new agent reports its version", func(t *testing.T) {
		d := d.For(t)
		b, err := os.ReadFile(agentV2)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		apply("agent-good", "agent-upgrade", fmt.Sprintf("  agent: {url: %q, sha256: %s, version: %s}\n", web.URL+"/fleet-agent-"+tasksAgentV2, hex.EncodeToString(sum[:]), tasksAgentV2))
		tr := finished(t, "agent-good")
		if r := tr.Status.Results[0]; tr.Status.Phase != "Succeeded" || r.Phase != events.TaskSucceeded || r.AgentVersion != tasksAgentV2 {
			t.Fatalf("status %+v, want Succeeded with agent version %s", tr.Status, tasksAgentV2)
		}
		if link := strings.TrimSpace(d.Must("readlink", tasksAgentLink)); link != tasksAgentLib+"/fleet-agent-"+tasksAgentV2 {
			t.Errorf("the agent link points to %s", link)
		}
		d.Must("test", "-x", tasksAgentLib+"/fleet-agent-"+tasksAgentV1)
		waitObject(t, ctx, srv, tasksNamespace, "fdev/"+device, "report agent "+tasksAgentV2, fieldIs(tasksAgentV2, "status", "inventory", "agentVersion"))
	})
	t.Logf("the TaskRun end-to-end test took %s", time.Since(start).Round(time.Second))
}

// taskRun is what the test reads of a TaskRun (kubectl get -o json): the
// fields docs/tasks.md documents.
type taskRun struct {
	Metadata struct {
		UID string `json:"uid"`
	} `json:"metadata"`
	Status struct {
		Phase  string `json:"phase"`
		Counts struct {
			Targets, Succeeded, Failed int
		} `json:"counts"`
		LatestFailure *struct {
			Device, Message string
		} `json:"latestFailure"`
		Results []struct {
			Device, Phase, Message, AgentVersion string
			ChangedPackages                      int
		} `json:"results"`
	} `json:"status"`
}

// badAgent is an agent build that exits at start.
const badAgent = "#!/bin/sh\necho 'this agent cannot start' >&2\nexit 1\n"

// taskReport returns the device's final report of the task uid.
func taskReport(t *testing.T, ctx context.Context, st *events.Store, device, uid string) events.TaskStatus {
	t.Helper()
	var got events.TaskStatus
	testenv.Eventually(t, "the device's report of task "+uid, time.Minute, func() bool {
		for r, err := range st.Replay(ctx, reportSubject(t, device, events.ReportTask), events.FromStart()) {
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

// reportSubject is fleet.report.<device>.<kind>.
func reportSubject(t *testing.T, device string, kind events.ReportKind) string {
	t.Helper()
	s, err := events.ReportSubject(device, kind)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

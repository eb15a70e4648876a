package devenv_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

var (
	agentOnce     sync.Once
	agentBin      string
	agentBuildErr error
)

// agentBinary builds cmd/fleet-agent once per test process, next to the
// test-built fleet.
func agentBinary(t *testing.T) string {
	t.Helper()
	dir := filepath.Dir(fleetBinary(t))
	agentOnce.Do(func() {
		agentBin = filepath.Join(dir, "fleet-agent")
		began := time.Now()
		cmd := exec.Command("go", "build", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp", "-o", agentBin, "./cmd/fleet-agent")
		cmd.Dir = repoRoot(t)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentBuildErr = errors.New("go build ./cmd/fleet-agent: " + err.Error() + "\n" + string(out))
			return
		}
		t.Logf("built fleet-agent in %s", time.Since(began).Round(time.Millisecond))
	})
	if agentBuildErr != nil {
		t.Fatal(agentBuildErr)
	}
	return agentBin
}

var (
	reAgentCommand = regexp.MustCompile(`(?m)^  (fleet-agent .*)$`)
	reAttachHint   = regexp.MustCompile(`(?m)^  (fleet enroll --dev --data-dir (\S+) .*)$`)
)

// TestARealAgentAttachedWithFleetEnrollDevRunsADeploymentOnPodman attaches
// a device to a running fleet dev as docs/fleet.md says: `fleet enroll
// --dev` (the real binary) reads everything from fleet dev's data folder
// and prints the agent's command line; the real fleet-agent binary runs
// exactly that line as a process of its own, driving the real Podman
// engine; a Deployment targeting the device converges there, its secret
// read from the OpenBao stand-in with the printed settings; deleting it
// removes the container.
func TestARealAgentAttachedWithFleetEnrollDevRunsADeploymentOnPodman(t *testing.T) {
	needKube(t)
	natsCLI(t)
	conn := podmantest.Connect(t) // fails under CI=true, skips elsewhere, without Podman
	sock, err := podmantest.SocketPath()
	if err != nil {
		t.Fatal(err)
	}
	image := podmantest.BuildImage(t, "attach", `CMD ["sh", "-c", "trap 'exit 0' TERM INT; test -n \"$DB_PASSWORD\" || exit 2; sleep 2147483647 & wait"]`+"\n")
	fleet, agent := fleetBinary(t), agentBinary(t)
	dev := "attach-" + randomHex(t, 4)
	// The agent labels its containers with its device id, unique to this
	// test: whatever a failed run leaves is removed.
	podmantest.RemoveLabelledAtCleanup(t, conn, "fleet.nationtech.io/device", dev)

	dir := t.TempDir()
	p := startDev(t, dir, "--devices", "1", "--runtime", "sim", "--listen", "127.0.0.1")
	defer p.stop(t)
	if !strings.Contains(p.out, "listening on       127.0.0.1 only") {
		t.Errorf("fleet dev does not say it listens on loopback only:\n%s", p.out)
	}
	if m := reAttachHint.FindStringSubmatch(p.out); m == nil || m[2] != dir {
		t.Errorf("fleet dev's output lacks the fleet enroll --dev line for its data folder %s:\n%s", dir, p.out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	// On the laptop: enroll the device with fleet dev's defaults.
	keyFile := filepath.Join(t.TempDir(), dev+".json")
	enroll := exec.CommandContext(ctx, fleet, "enroll", "--dev", "--data-dir", dir, "--key-file", keyFile, "--label", "attach-test="+dev,
		"--agent-key-file", keyFile, "--agent-podman-socket", "unix://"+sock, dev)
	enroll.Env = cleanEnv()
	out, err := enroll.CombinedOutput()
	if err != nil {
		t.Fatalf("fleet enroll --dev: %v\n%s", err, out)
	}
	printed := string(out)
	m := reAgentCommand.FindStringSubmatch(printed)
	if m == nil {
		t.Fatalf("fleet enroll --dev printed no fleet-agent command line:\n%s", printed)
	}
	line := m[1]
	for _, want := range []string{"--nats-url " + p.in.NATSURL, "--key-file " + keyFile, "--runtime podman", "--podman-socket unix://" + sock,
		"--openbao-url " + p.in.OpenBaoAddr, "--openbao-role fleet-group-lab-lab", "--openbao-device-prefix fleet/lab"} {
		if !strings.Contains(line, want) {
			t.Errorf("the printed command line lacks %q:\n%s", want, line)
		}
	}
	for _, want := range []string{"enrolled device lab/" + dev, "the operator registered " + dev + "'s identity",
		"\n  NATS_URL=" + p.in.NATSURL + "\n", "\n  FLEET_OPENBAO_URL=" + p.in.OpenBaoAddr + "\n", "\n  FLEET_OPENBAO_ROLE=fleet-group-lab-lab\n",
		"\n  FLEET_OPENBAO_DEVICE_PREFIX=fleet/lab\n", "fleet dev listens on 127.0.0.1 only"} {
		if !strings.Contains(printed, want) {
			t.Errorf("fleet enroll --dev's output lacks %q:\n%s", want, printed)
		}
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key file %s: %v, mode %v; want mode 0600", keyFile, err, fi.Mode().Perm())
	}

	// On the device: exactly the printed command line, fleet-agent found
	// on PATH.
	logs := &testenv.SyncBuffer{}
	cmd := exec.Command("bash", "-c", "exec "+line)
	cmd.Env = append(cleanEnv(), "PATH="+filepath.Dir(agent)+":"+systemPATH)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stopAgent := func() {
		if stopped {
			return
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("fleet-agent exited with %v after SIGTERM:\n%s", err, tail(logs.String(), 3000))
			}
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("fleet-agent did not stop within a minute of SIGTERM:\n%s", tail(logs.String(), 3000))
		}
	}
	defer stopAgent()

	// A Deployment for that device alone, its secret from the stand-in.
	manifest := filepath.Join(t.TempDir(), "deployment.yaml")
	if err := os.WriteFile(manifest, []byte(strings.NewReplacer("DEV", dev, "IMAGE", image).Replace(attachDeployment)), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, ctx, p.in, "apply", "-n", "lab", "-f", manifest)
	wait := exec.CommandContext(ctx, p.in.Kubectl, "--kubeconfig", p.in.Kubeconfig, "wait", "-n", "lab", "fdeploy/"+dev,
		"--for=jsonpath={.status.phase}=Succeeded", "--timeout=3m")
	if out, err := wait.CombinedOutput(); err != nil {
		t.Fatalf("the Deployment did not succeed on the attached device: %v\n%s\n%s\nagent:\n%s", err, out,
			kubectl(t, ctx, p.in, "get", "fdeploy,fdev", "-n", "lab", "-o", "yaml"), tail(logs.String(), 4000))
	}
	if got := kubectl(t, ctx, p.in, "get", "fdeploy", "-n", "lab", dev, "-o", "jsonpath={.status.counts.total}/{.status.counts.succeeded}"); got != "1/1" {
		t.Errorf("the Deployment's counts total/succeeded are %s, want 1/1", got)
	}
	var liveness string
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		liveness = kubectl(t, ctx, p.in, "get", "fdev", "-n", "lab", dev, "-o", "jsonpath={.status.liveness}")
		return liveness == "Online"
	}); err != nil {
		t.Errorf("kubectl get fdev %s: liveness %q, want Online (%v)", dev, liveness, err)
	}
	if hist, err := p.script(ctx, "fleet history deployment lab/"+dev); err != nil || !strings.Contains(hist, dev+" reports Converged") {
		t.Errorf("fleet history deployment lab/%s (%v) lacks the device's Converged report:\n%s", dev, err, hist)
	}

	// The container runs on the engine, with the stand-in's secret.
	ctr, err := containers.Inspect(conn, dev, nil)
	if err != nil {
		t.Fatalf("the attached device's container: %v", err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "secrets", "demo-db.password"))
	if err != nil {
		t.Fatal(err)
	}
	if ctr.State == nil || !ctr.State.Running || ctr.Config.Labels["fleet.nationtech.io/device"] != dev {
		t.Errorf("container %s: running %v, device label %q; want running, %s", dev, ctr.State != nil && ctr.State.Running,
			ctr.Config.Labels["fleet.nationtech.io/device"], dev)
	}
	if !slices.Contains(ctr.Config.Env, "DB_PASSWORD="+strings.TrimSpace(string(want))) {
		t.Error("the container lacks DB_PASSWORD from the OpenBao stand-in")
	}
	if secret := strings.TrimSpace(string(want)); strings.Contains(printed+logs.String(), secret) {
		t.Error("fleet enroll or the agent printed the secret's value")
	}

	// Deleting the Deployment removes the container.
	kubectl(t, ctx, p.in, "delete", "-n", "lab", "fdeploy", dev, "--wait")
	var left []string
	if err := testenv.Poll(ctx, 2*time.Minute, func() bool {
		list, err := containers.List(conn, new(containers.ListOptions).WithAll(true).
			WithFilters(map[string][]string{"label": {"fleet.nationtech.io/device=" + dev}}))
		if err != nil {
			t.Fatal(err)
		}
		left = left[:0]
		for _, c := range list {
			left = append(left, c.Names...)
		}
		return len(left) == 0
	}); err != nil {
		t.Errorf("the attached device's containers %v are still there after the Deployment was deleted (%v)", left, err)
	}
	stopAgent()
}

// attachDeployment targets the attached device alone (DEV: its id and its
// label attach-test; IMAGE: the test image); the service needs the demo
// secret of the OpenBao stand-in.
const attachDeployment = `apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata:
  name: DEV
spec:
  allowedGroups: [lab]
  targetSelector:
    matchLabels:
      attach-test: DEV
  rollout:
    strategy: Immediate
  score:
    type: PodmanV0
    data:
      services:
        - name: DEV
          image: IMAGE
          ports: []
          env: []
          secret_env:
            - name: DB_PASSWORD
              secret: apps/analysis/db
              key: password
          volumes: []
          restart_policy: unless-stopped
`

// cleanEnv is the test's environment without what would configure fleet
// or fleet-agent behind the flags' back (NATS_*, FLEET_*, KUBECONFIG) and
// without PATH.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "PATH" && name != "KUBECONFIG" && !strings.HasPrefix(name, "NATS_") && !strings.HasPrefix(name, "FLEET_") {
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+systemPATH)
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

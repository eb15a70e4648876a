package dev_test

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
// read from the OpenBao stand-in with the printed settings. Then the agent
// runs as deploy/systemd/fleet-agent.service runs it, with the printed
// EnvironmentFile lines, and a new revision converges; deleting the
// Deployment removes the container.
func TestARealAgentAttachedWithFleetEnrollDevRunsADeploymentOnPodman(t *testing.T) {
	r := newAttachRig(t, "attach", `CMD ["sh", "-c", "trap 'exit 0' TERM INT; test -n \"$DB_PASSWORD\" || exit 2; sleep 2147483647 & wait"]`+"\n", "attach")
	conn, sock, image, agent, dev, dir, p := r.conn, r.sock, r.image, r.agent, r.dev, r.dir, r.p
	if !strings.Contains(p.out, "listening on       127.0.0.1 only") {
		t.Errorf("fleet dev does not say it listens on loopback only:\n%s", p.out)
	}
	if m := reAttachHint.FindStringSubmatch(p.out); m == nil || m[2] != dir {
		t.Errorf("fleet dev's output lacks the fleet enroll --dev line for its data folder %s:\n%s", dir, p.out)
	} else if strings.Contains(m[1], "--key-file") {
		t.Errorf("the printed fleet enroll line names a key file, which lands where it runs (the repository): %s", m[1])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	// On the laptop: enroll the device with fleet dev's defaults; the key
	// file goes to the data folder.
	keyFile := r.keyFile()
	printed, line := r.enroll(t, ctx, "attach-test="+dev)
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
	if fi, err := os.Stat(keyFile); err != nil {
		t.Fatal(err)
	} else if fi.Mode().Perm() != 0o600 {
		t.Errorf("the key file %s has mode %v, want 0600", keyFile, fi.Mode().Perm())
	}

	// On the device: exactly the printed command line, fleet-agent found
	// on PATH.
	first := r.startAgent(t, line)
	defer first.stop(t)

	// A Deployment for that device alone, its secret from the stand-in.
	applyAttach(t, ctx, p, dev, image, "first", first)
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

	secret := checkAttachContainer(t, ctx, conn, dev, dir, "first")
	if strings.Contains(printed+first.logs.String(), secret) {
		t.Error("fleet enroll or the agent printed the secret's value")
	}
	first.stop(t)

	// The same device under systemd: the unit's ExecStart and Environment
	// (its Podman socket this machine's), the printed EnvironmentFile
	// lines. It adopts the container, and a new revision of the
	// Deployment replaces it, its secret read with those settings.
	unitArgs, unitEnv := systemdUnit(t, "unix://"+sock, keyFile, agent)
	envFile := regexp.MustCompile(`(?m)^  ([A-Z_]+=\S+)$`).FindAllStringSubmatch(printed, -1)
	if len(envFile) != 4 {
		t.Fatalf("fleet enroll --dev printed %d EnvironmentFile lines, want 4:\n%s", len(envFile), printed)
	}
	for _, kv := range envFile {
		unitEnv = append(unitEnv, kv[1]) // EnvironmentFile= overrides Environment=
	}
	second := startAgent(t, unitArgs, append(cleanEnv(), unitEnv...))
	defer second.stop(t)
	applyAttach(t, ctx, p, dev, image, "second", second)
	if secret := checkAttachContainer(t, ctx, conn, dev, dir, "second"); strings.Contains(second.logs.String(), secret) {
		t.Error("the agent under the unit's settings printed the secret's value")
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
	second.stop(t)
}

// agentProc is a running fleet-agent process.
type agentProc struct {
	cmd     *exec.Cmd
	logs    *testenv.SyncBuffer
	exited  chan error
	stopped bool
}

// startAgent starts the fleet-agent process args (a command line) with env.
func startAgent(t *testing.T, args, env []string) *agentProc {
	t.Helper()
	a := &agentProc{cmd: exec.Command(args[0], args[1:]...), logs: &testenv.SyncBuffer{}, exited: make(chan error, 1)}
	a.cmd.Env = env
	a.cmd.Stdout, a.cmd.Stderr = a.logs, a.logs
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.exited <- a.cmd.Wait() }()
	return a
}

// stop sends SIGTERM, as systemd does, and checks the agent exits 0.
func (a *agentProc) stop(t *testing.T) {
	t.Helper()
	if a.stopped {
		return
	}
	a.stopped = true
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-a.exited:
		if err != nil {
			t.Errorf("fleet-agent exited with %v after SIGTERM:\n%s", err, tail(a.logs.String(), 3000))
		}
	case <-time.After(time.Minute):
		_ = a.cmd.Process.Kill()
		<-a.exited
		t.Errorf("fleet-agent did not stop within a minute of SIGTERM:\n%s", tail(a.logs.String(), 3000))
	}
}

// applyAttach applies attachDeployment with GREETING=greeting and waits
// until its revision of the current generation has succeeded on the device.
func applyAttach(t *testing.T, ctx context.Context, p *devProc, dev, image, greeting string, a *agentProc) {
	t.Helper()
	applyAttached(t, ctx, p, dev, strings.NewReplacer("DEV", dev, "IMAGE", image, "GREETING_VALUE", greeting).Replace(attachDeployment), a)
}

// applyAttached applies manifest, a Deployment named dev, and waits until
// its revision of the current generation has succeeded on the device.
func applyAttached(t *testing.T, ctx context.Context, p *devProc, dev, yaml string, a *agentProc) {
	t.Helper()
	manifest := filepath.Join(t.TempDir(), "deployment.yaml")
	if err := os.WriteFile(manifest, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, ctx, p.in, "apply", "-n", "lab", "-f", manifest)
	gen := kubectl(t, ctx, p.in, "get", "fdeploy", "-n", "lab", dev, "-o", "jsonpath={.metadata.generation}")
	var got string
	if err := testenv.Poll(ctx, 3*time.Minute, func() bool {
		got = kubectl(t, ctx, p.in, "get", "fdeploy", "-n", "lab", dev, "-o", "jsonpath={.status.revision.generation} {.status.phase}")
		return got == gen+" Succeeded"
	}); err != nil {
		t.Fatalf("generation %s of the Deployment did not succeed on the attached device (revision generation and phase: %q; %v)\n%s\nagent:\n%s",
			gen, got, err, kubectl(t, ctx, p.in, "get", "fdeploy,fdev", "-n", "lab", "-o", "yaml"), tail(a.logs.String(), 4000))
	}
}

// checkAttachContainer checks that the attached device's container runs on
// the engine with GREETING=greeting and the OpenBao stand-in's demo
// secret, and returns the secret.
func checkAttachContainer(t *testing.T, ctx context.Context, conn context.Context, dev, dataDir, greeting string) string {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(dataDir, "secrets", "demo-db.password"))
	if err != nil {
		t.Fatal(err)
	}
	secret := strings.TrimSpace(string(want))
	ctr, err := containers.Inspect(conn, dev, nil)
	if err != nil {
		t.Fatalf("the attached device's container: %v", err)
	}
	if ctr.State == nil || !ctr.State.Running || ctr.Config.Labels["fleet.nationtech.io/device"] != dev {
		t.Errorf("container %s: running %v, device label %q; want running, %s", dev, ctr.State != nil && ctr.State.Running,
			ctr.Config.Labels["fleet.nationtech.io/device"], dev)
	}
	if !slices.Contains(ctr.Config.Env, "GREETING="+greeting) {
		t.Errorf("container %s lacks GREETING=%s: not the current revision", dev, greeting)
	}
	if !slices.Contains(ctr.Config.Env, "DB_PASSWORD="+secret) {
		t.Errorf("container %s lacks DB_PASSWORD from the OpenBao stand-in", dev)
	}
	return secret
}

// systemdUnit is deploy/systemd/fleet-agent.service's ExecStart, with the
// test-built agent and socket for the unit's %U socket, and its
// Environment= settings, with keyFile for the unit's key file.
func systemdUnit(t *testing.T, socket, keyFile, agent string) (args, env []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot(t), "deploy", "systemd", "fleet-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "ExecStart="); ok {
			args = strings.Fields(v)
		}
		if v, ok := strings.CutPrefix(l, "Environment="); ok {
			name, _, _ := strings.Cut(v, "=")
			if name == "FLEET_KEY_FILE" {
				v = name + "=" + keyFile
			}
			env = append(env, v)
		}
	}
	if len(args) == 0 || filepath.Base(args[0]) != "fleet-agent" {
		t.Fatalf("deploy/systemd/fleet-agent.service has no ExecStart running fleet-agent: %q", args)
	}
	args[0] = agent
	for i, a := range args {
		if strings.Contains(a, "%U") {
			args[i] = socket
		}
	}
	return args, env
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
          env:
            - name: GREETING
              value: GREETING_VALUE
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

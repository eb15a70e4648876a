package dev_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/dev"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

func init() { ctrllog.SetLogger(logr.Discard()) }

// needKube applies the CI policy when the kube binaries are missing.
func needKube(t *testing.T) {
	t.Helper()
	dir, err := dev.DefaultKubeBinDir()
	if err == nil {
		for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
			if _, err = exec.LookPath(filepath.Join(dir, b)); err != nil {
				break
			}
		}
	}
	if err != nil {
		testenv.Missing(t, "kube-apiserver/etcd/kubectl", dev.SetupK8sCommand, err)
	}
}

// natsCLI finds the nats CLI as docs/recipes_test.go does.
func natsCLI(t *testing.T) string {
	t.Helper()
	path := os.Getenv("FLEET_NATS_CLI")
	if path == "" {
		path = filepath.Join("..", ".cache", "tools", "natscli-v0.5.0", "nats")
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		_, err = exec.LookPath(abs)
	}
	if err != nil {
		testenv.Missing(t, "the nats CLI v0.5.0", "go tool -modfile=tools/go.mod task setup:natscli", err)
	}
	return abs
}

func kubectl(t *testing.T, ctx context.Context, in dev.Info, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, in.Kubectl, append([]string{"--kubeconfig", in.Kubeconfig}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl %v: %v: %s", args, err, stderr.String())
	}
	return string(out)
}

// documentedReplay is the rollout replay recipe of docs/debugging-with-nats.md.
func documentedReplay(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/debugging-with-nats.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^nats sub --stream FLEET_ROLLOUT --all -T 'fleet\.rollout\.deployment\.lab\.analysis-api'$`).Find(b)
	if m == nil {
		t.Fatal("docs/debugging-with-nats.md lost its rollout replay recipe")
	}
	return string(m)
}

// natsRun runs a documented nats CLI recipe as fleet dev's printed export
// line sets it up, and returns its output.
func natsRun(ctx context.Context, natsBin string, in dev.Info, script string) (string, error) {
	pw, err := os.ReadFile(in.AdminPasswordFile)
	if err != nil {
		return "", err
	}
	home, err := os.MkdirTemp("", "fleet-dev-nats-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(home)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(rctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), "NATS_URL="+in.NATSURL, "NATS_USER="+in.AdminUser, "NATS_PASSWORD="+strings.TrimSpace(string(pw)),
		"PATH="+filepath.Dir(natsBin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// natsOut is natsRun's output with its error, for failure messages.
func natsOut(ctx context.Context, natsBin string, in dev.Info, script string) string {
	out, err := natsRun(ctx, natsBin, in, script)
	if err != nil {
		out += "\n" + err.Error()
	}
	return out
}

func TestDevRefusesBadOptions(t *testing.T) {
	err := dev.Run(context.Background(), dev.Options{NATSPort: 70000, Devices: -1, Runtime: "docker"})
	for _, want := range []string{"--data-dir", "--nats-port", "--devices", "--runtime"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error naming %s", err, want)
		}
	}
}

func TestDevFailsFastNamingTheSetupTaskWhenKubeBinariesAreMissing(t *testing.T) {
	err := dev.Run(context.Background(), dev.Options{DataDir: t.TempDir(), NATSPort: -1, KubeBinDir: t.TempDir()})
	if !errors.Is(err, dev.ErrKubeBinariesMissing) || !strings.Contains(err.Error(), "go tool -modfile=tools/go.mod task setup:k8s") {
		t.Errorf("got %v, want ErrKubeBinariesMissing naming the setup task", err)
	}
}

func TestKubernetesVersionIsTheHarnessVersion(t *testing.T) {
	if dev.KubernetesVersion != kubeapi.KubernetesVersion || dev.SetupK8sCommand != kubeapi.SetupCommand {
		t.Errorf("devenv uses %s (%s), the test harness %s (%s)", dev.KubernetesVersion, dev.SetupK8sCommand,
			kubeapi.KubernetesVersion, kubeapi.SetupCommand)
	}
}

func TestDevWithRuntimePodmanFailsNamingTheSocketFlagWhenNoSocketAnswers(t *testing.T) {
	needKube(t)
	var out bytes.Buffer
	err := dev.Run(context.Background(), dev.Options{DataDir: t.TempDir(), NATSPort: -1, Out: &out,
		Runtime: dev.RuntimePodman, PodmanSocket: filepath.Join(t.TempDir(), "podman.sock")})
	for _, want := range []string{"--runtime podman", "--podman-socket", dev.SetupPodmanCommand} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error naming %s", err, want)
		}
	}
}

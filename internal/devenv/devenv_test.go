package devenv_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/devenv"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

func init() { ctrllog.SetLogger(logr.Discard()) }

// needKube applies the CI policy when the kube binaries are missing.
func needKube(t *testing.T) {
	t.Helper()
	dir, err := devenv.DefaultKubeBinDir()
	if err == nil {
		for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
			if _, err = exec.LookPath(filepath.Join(dir, b)); err != nil {
				break
			}
		}
	}
	if err != nil {
		testenv.Missing(t, "kube-apiserver/etcd/kubectl", devenv.SetupK8sCommand, err)
	}
}

// natsCLI finds the nats CLI as docs/recipes_test.go does.
func natsCLI(t *testing.T) string {
	t.Helper()
	path := os.Getenv("FLEET_NATS_CLI")
	if path == "" {
		path = filepath.Join("..", "..", ".cache", "tools", "natscli-v0.5.0", "nats")
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

// start runs fleet dev in the background and returns what it offers and a
// stop function that waits for Run to return.
func start(t *testing.T, dir string, devices int, out *bytes.Buffer) (devenv.Info, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan devenv.Info, 1)
	done := make(chan error, 1)
	go func() {
		done <- devenv.Run(ctx, devenv.Options{
			DataDir: dir, NATSPort: -1, Devices: devices, Out: out,
			Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
			Ready:  func(in devenv.Info) { ready <- in },
		})
	}()
	select {
	case in := <-ready:
		t.Logf("fleet dev started in %s", in.StartupTime)
		stopped := false
		return in, func() {
			if stopped {
				return
			}
			stopped = true
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(2 * time.Minute):
				t.Error("Run did not return within 2 minutes of the cancel")
			}
		}
	case err := <-done:
		cancel()
		t.Fatalf("fleet dev stopped before it was ready: %v", err)
	case <-time.After(3 * time.Minute):
		cancel()
		t.Fatal("fleet dev not ready after 3 minutes")
	}
	return devenv.Info{}, nil
}

func kubectl(t *testing.T, ctx context.Context, in devenv.Info, args ...string) string {
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
	b, err := os.ReadFile("../../docs/debugging-with-nats.md")
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
func natsRun(ctx context.Context, natsBin string, in devenv.Info, script string) (string, error) {
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
func natsOut(ctx context.Context, natsBin string, in devenv.Info, script string) string {
	out, err := natsRun(ctx, natsBin, in, script)
	if err != nil {
		out += "\n" + err.Error()
	}
	return out
}

func TestDevRollsOutTheExampleToSimulatedDevicesAndResumesAfterARestart(t *testing.T) {
	needKube(t)
	natsBin := natsCLI(t)
	replay := documentedReplay(t)
	dir := t.TempDir()
	var out bytes.Buffer
	in, stop := start(t, dir, 3, &out)
	defer stop()
	for _, want := range []string{"export KUBECONFIG=" + in.Kubeconfig, "export NATS_URL=" + in.NATSURL,
		"kubectl apply -n lab -f examples/analysis-api.yaml", "kubectl get fdeploy -n lab -w",
		"nats sub --stream FLEET_ROLLOUT --all -T 'fleet.rollout.deployment.lab.analysis-api'"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("fleet dev output lacks %q:\n%s", want, out.String())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	kubectl(t, ctx, in, "apply", "-n", "lab", "-f", "../../examples/analysis-api.yaml")
	deadline := time.Now().Add(2 * time.Minute)
	for phase := ""; phase != "Succeeded"; {
		if time.Now().After(deadline) {
			t.Fatalf("phase %q after 2 minutes, want Succeeded:\n%s\nreports and rollout:\n%s", phase,
				kubectl(t, ctx, in, "get", "fdeploy,fdev", "-n", "lab", "-o", "yaml"),
				natsOut(ctx, natsBin, in, "nats sub --stream FLEET_REPORTS --all -T 'fleet.report.*.workload'; "+replay+
					"; for d in sim-1 sim-2 sim-3; do echo \"intent of $d:\"; nats kv get fleet-intent $d --raw | head -c 400 || true; echo; done"))
		}
		phase = kubectl(t, ctx, in, "get", "fdeploy", "-n", "lab", "analysis-api", "-o", "jsonpath={.status.phase}")
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}

	rout, err := natsRun(ctx, natsBin, in, replay)
	if err != nil {
		t.Fatalf("%s: %v\n%s", replay, err, rout)
	}
	for _, want := range []string{"rollout.started", "rollout.canary-stage", "rollout.succeeded"} {
		if !strings.Contains(rout, want) {
			t.Errorf("the replay lacks %s:\n%s", want, rout)
		}
	}
	stop()
	pw, err := os.ReadFile(in.AdminPasswordFile)
	if err != nil {
		t.Fatal(err)
	}

	// The next run resumes: same JetStream store, same etcd data.
	in, stop = start(t, dir, 3, &bytes.Buffer{})
	defer stop()
	if got := kubectl(t, ctx, in, "get", "fdeploy", "-n", "lab", "analysis-api", "-o", "jsonpath={.status.phase}"); got != "Succeeded" {
		t.Errorf("after a restart the Deployment's phase is %q, want Succeeded", got)
	}
	nc, err := nats.Connect(in.NATSURL, nats.UserInfo(in.AdminUser, strings.TrimSpace(string(pw))))
	if err != nil {
		t.Fatalf("after a restart the admin password no longer works: %v", err)
	}
	defer nc.Close()
	st, _ := events.NewStore(nc, events.StoreOptions{})
	rec, err := st.Last(ctx, "fleet.rollout.deployment.lab.analysis-api")
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
	if rec.Event.Type != events.TypeRolloutSucceeded {
		t.Errorf("after restart the last rollout event is %s, want %s", rec.Event.Type, events.TypeRolloutSucceeded)
	}
	// Devices come back with new keys and report again.
	deadline = time.Now().Add(time.Minute)
	for {
		online := kubectl(t, ctx, in, "get", "fdev", "-n", "lab", "-o", "jsonpath={.items[*].status.liveness}")
		if strings.Count(online, "Online") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("devices after a restart: %q, want 3 Online", online)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func TestDevRefusesBadOptions(t *testing.T) {
	err := devenv.Run(context.Background(), devenv.Options{NATSPort: 70000, Devices: -1})
	for _, want := range []string{"--data-dir", "--nats-port", "--devices"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error naming %s", err, want)
		}
	}
}

func TestDevFailsFastNamingTheSetupTaskWhenKubeBinariesAreMissing(t *testing.T) {
	err := devenv.Run(context.Background(), devenv.Options{DataDir: t.TempDir(), NATSPort: -1, KubeBinDir: t.TempDir()})
	if !errors.Is(err, devenv.ErrKubeBinariesMissing) || !strings.Contains(err.Error(), "go tool -modfile=tools/go.mod task setup:k8s") {
		t.Errorf("got %v, want ErrKubeBinariesMissing naming the setup task", err)
	}
}

func TestKubernetesVersionIsTheHarnessVersion(t *testing.T) {
	if devenv.KubernetesVersion != kubeapi.KubernetesVersion || devenv.SetupK8sCommand != kubeapi.SetupCommand {
		t.Errorf("devenv uses %s (%s), the test harness %s (%s)", devenv.KubernetesVersion, devenv.SetupK8sCommand,
			kubeapi.KubernetesVersion, kubeapi.SetupCommand)
	}
}

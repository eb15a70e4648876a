package docs

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/operator"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../k8s/config/crd"}, ManifestDirs: []string{"../k8s/config/admission"}})
}

// TestKubectlRecipes runs the kubectl recipes of operator.md, devices.md
// and tasks.md, in order, with the real kubectl and nats CLIs against a real
// API server, the operator, and a device reporting heartbeats, inventory
// and its containers.
func TestKubectlRecipes(t *testing.T) {
	srv := kubeapi.Shared(t)
	nats := natsCLI(t)
	rs := recipes(t, "operator.md", "kubectl-recipe")
	devRecipes := recipes(t, "devices.md", "kubectl-recipe")
	taskRecipes := recipes(t, "tasks.md", "kubectl-recipe")
	if len(rs) < 5 || len(devRecipes) < 8 || len(taskRecipes) < 7 {
		t.Fatalf("found %d kubectl recipes in operator.md, %d in devices.md and %d in tasks.md; the marker format changed?",
			len(rs), len(devRecipes), len(taskRecipes))
	}
	rs = append(append(rs, devRecipes...), taskRecipes...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nsrv, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	opCtx, stopOp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- operator.Run(opCtx, operator.Options{RESTConfig: srv.RESTConfig(), Store: st, Reader: st, IntentKV: kv, Devices: st,
			Logger: slog.New(slog.DiscardHandler), StatusInterval: 100 * time.Millisecond})
	}()
	// Device rpi-1 reports like an agent: its inventory once, heartbeats
	// until the test ends.
	inv, err := events.New(events.Keys{Device: "rpi-1"}, events.DeviceInventory{OS: "Debian GNU/Linux 12", Arch: "arm64",
		Kernel: "6.1.0", AgentVersion: "0.1.0", Labels: map[string]string{"zone": "lab-a", "role": "analyzer"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Report(ctx, inv); err != nil {
		t.Fatal(err)
	}
	// Its containers: Deployment lab/analysis-api crash-loops.
	exited := time.Date(2026, 12, 5, 3, 4, 5, 0, time.UTC)
	containers, err := events.New(events.Keys{Device: "rpi-1"}, events.DeviceContainers{Workloads: []events.WorkloadContainers{{
		Namespace: "lab", Deployment: "analysis-api", UID: "0b9f6c1e-5d0a-4f43-9d2b-7b1f3e2a9c11", Generation: 2, RevisionID: "2-5f2c9a1b",
		Degraded: events.HealthCrashLoop, Containers: []events.ContainerState{
			{Name: "migrate", Role: events.ContainerRoleInit, State: "exited", ExitedAt: &exited},
			{Name: "api", Role: events.ContainerRoleService, State: "running", Restarts: 3, ExitCode: 2, ExitedAt: &exited,
				ImageDigest: "sha256:9c1e5d0a4f439d2b7b1f3e2a9c110b9f6c1e5d0a4f439d2b7b1f3e2a9c110b9f"},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Report(ctx, containers); err != nil {
		t.Fatal(err)
	}
	go func() {
		for opCtx.Err() == nil {
			hb, err := events.New(events.Keys{Device: "rpi-1"}, events.DeviceHeartbeat{AgentVersion: "0.1.0"})
			if err != nil {
				return
			}
			if err := st.Report(opCtx, hb); err != nil {
				return
			}
			select {
			case <-opCtx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	defer func() {
		stopOp()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	}()

	// The admission policy TestMain installed is enforced shortly after
	// it is created; the recipes show a refusal, so wait until a write it
	// refuses is refused (a server-side dry run runs admission).
	forged := []byte(`{"apiVersion":"fleet.nationtech.io/v1alpha1","kind":"Deployment","metadata":{"name":"probe","namespace":"default",` +
		`"annotations":{"fleet.nationtech.io/rollout-action":"{\"action\":\"pause\",\"generation\":1,\"by\":\"somebody-else\",\"request\":\"probe\"}"}},` +
		`"spec":{"targetSelector":{"matchLabels":{"role":"x"}},"rollout":{"strategy":"Immediate"},` +
		`"score":{"type":"PodmanV0","data":{"services":[{"name":"api","image":"registry.example.com/api:v1"}]}}}}`)
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		_, err := srv.Kubectl(ctx, forged, "create", "--dry-run=server", "-f", "-")
		return err != nil && strings.Contains(err.Error(), "fleet-rollout-action-by")
	}); err != nil {
		t.Fatalf("the admission policy of k8s/config/admission is not enforced: %v", err)
	}

	home := t.TempDir()
	for _, r := range rs {
		t.Run(r.script, func(t *testing.T) {
			rctx, rcancel := context.WithTimeout(ctx, 90*time.Second)
			defer rcancel()
			cmd := exec.CommandContext(rctx, "bash", "-euo", "pipefail", "-c", r.script)
			cmd.Dir = ".."
			cmd.Env = append(os.Environ(), "KUBECONFIG="+srv.KubeconfigPath(), "NATS_URL="+nsrv.ClientURL(),
				"HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
				"PATH="+filepath.Dir(srv.KubectlPath())+string(os.PathListSeparator)+filepath.Dir(nats)+string(os.PathListSeparator)+os.Getenv("PATH"))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("recipe failed: %v\n%s", err, out.String())
			}
			for _, want := range r.expect {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

// TestTheRolloutWaitRecipes runs the kubectl recipes of rollouts.md, in
// order: one Deployment whose generations succeed, fail (a health check
// that fails), stall (an image name with a typo: every pull fails with
// "registry unavailable") and stall again (a target with no agent never
// reports), each waited for with the documented command, with
// the real kubectl against a real API server, the operator, and an agent on
// the simulated container engine.
func TestTheRolloutWaitRecipes(t *testing.T) {
	srv := kubeapi.Shared(t)
	rs := recipes(t, "rollouts.md", "kubectl-recipe")
	if len(rs) != 4 {
		t.Fatalf("found %d kubectl recipes in rollouts.md, want 4 (succeed, fail, stall on an image, stall on a silent device); the marker format changed?", len(rs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nsrv, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	opCtx, stopOp := context.WithCancel(ctx)
	defer stopOp()
	opDone := make(chan error, 1)
	go func() {
		opDone <- operator.Run(opCtx, operator.Options{RESTConfig: srv.RESTConfig(), Store: st, Reader: st, IntentKV: kv, Devices: st,
			Logger: logger, StatusInterval: 100 * time.Millisecond, SeveralPerProcess: true})
	}()
	// Device wait-1 in lab, with an agent whose engine has the image of the
	// recipes locally and reaches no registry.
	const device = "wait-1"
	for _, obj := range []string{"apiVersion: v1\nkind: Namespace\nmetadata: {name: lab}\n",
		"apiVersion: fleet.nationtech.io/v1alpha1\nkind: Device\nmetadata: {name: " + device + ", namespace: lab, labels: {app: wait-demo}}\nspec: {identitySubject: sub-" + device + "}\n"} {
		if out, err := srv.Kubectl(ctx, []byte(obj), "apply", "-f", "-"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	rt := sim.New(sim.Options{LocalImages: []string{"registry.example.com/api:v1"}})
	rt.SetRegistryUnavailable(true)
	agCtx, stopAgent := context.WithCancel(ctx)
	agDone := make(chan error, 1)
	go func() {
		nc := natstest.Connect(t, nsrv, nats.CustomInboxPrefix("_INBOX_"+device))
		agDone <- agent.Run(agCtx, agent.Options{Device: device, Conn: nc, Logger: logger,
			Reconciler: &agent.Reconciler{Runtime: rt, Log: logger, StopTimeout: time.Second}})
	}()
	defer func() {
		stopAgent()
		<-agDone
		stopOp()
		if err := <-opDone; err != nil {
			t.Errorf("operator: %v", err)
		}
	}()

	home := t.TempDir()
	for _, r := range rs {
		t.Run(r.script, func(t *testing.T) {
			rctx, rcancel := context.WithTimeout(ctx, 3*time.Minute)
			defer rcancel()
			cmd := exec.CommandContext(rctx, "bash", "-euo", "pipefail", "-c", r.script)
			cmd.Dir = ".."
			cmd.Env = append(os.Environ(), "KUBECONFIG="+srv.KubeconfigPath(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
				"PATH="+filepath.Dir(srv.KubectlPath())+string(os.PathListSeparator)+os.Getenv("PATH"))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("recipe failed: %v\n%s", err, out.String())
			}
			for _, want := range r.expect {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

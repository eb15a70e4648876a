package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/nats-io/nats.go"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/podman"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/operator"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../../k8s/config/crd"}})
}

// TestADeploymentAppliedWithKubectlConvergesOnARealPodmanAgent: kubectl
// apply → operator revision and rollout → fleet-intent KV → agent on real
// Podman → workload report → Deployment status Succeeded; kubectl delete
// removes the containers.
func TestADeploymentAppliedWithKubectlConvergesOnARealPodmanAgent(t *testing.T) {
	testenv.Exclusive(t, testenv.PodmanExamples)
	srv := kubeapi.Shared(t)
	podmantest.Connect(t)
	sock, err := podmantest.SocketPath()
	if err != nil {
		t.Fatal(err)
	}
	image := podmantest.BuildImage(t, "e2e-runs", "CMD [\"sh\", \"-c\", \"trap 'exit 0' TERM; sleep 3600 & wait\"]\n")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	nsrv, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	logger := quietLogger()
	runOperator(t, ctx, srv, st, kv, operator.Options{Devices: st, Logger: logger, StatusInterval: 200 * time.Millisecond})

	device := fmt.Sprintf("e2e-%d", os.Getpid())
	rt, err := podman.New(ctx, podman.Options{URI: "unix://" + sock})
	if err != nil {
		t.Fatal(err)
	}
	nc := natstest.Connect(t, nsrv, nats.CustomInboxPrefix("_INBOX_"+device))
	agCtx, stopAgent := context.WithCancel(ctx)
	agDone := make(chan error, 1)
	rec := &agent.Reconciler{Runtime: rt, Log: logger, StopTimeout: 10 * time.Second}
	go func() {
		agDone <- agent.Run(agCtx, agent.Options{Device: device, Conn: nc, Reconciler: rec, Logger: logger,
			Labels: map[string]string{"role": "e2e"}})
	}()
	defer func() { stopAgent(); <-agDone }()
	defer func() { _ = rec.Remove(context.Background(), "e2e", "web") }()

	kubectl := kubectlFor(t, ctx, srv)
	kubectl("", "create", "namespace", "e2e")
	kubectl(fmt.Sprintf(`apiVersion: fleet.nationtech.io/v1alpha1
kind: Device
metadata: {name: %s}
spec: {identitySubject: "sub-%s"}
`, device, device), "apply", "-n", "e2e", "-f", "-")
	// The device's self-reported label reaches the Device through the
	// operator; the Deployment selects on it.
	waitObject(t, ctx, srv, "e2e", "fdev/"+device, "get its self-reported role label", fieldIs("e2e", "metadata", "labels", "role"))
	kubectl(fmt.Sprintf(`apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata: {name: web}
spec:
  targetSelector: {matchLabels: {role: e2e}}
  score:
    type: PodmanV0
    data:
      services:
        - name: web-%s
          image: %s
          ports: ["18181:8080"]
`, device, image), "apply", "-n", "e2e", "-f", "-")
	waitObject(t, ctx, srv, "e2e", "fdeploy/web", "succeed", fieldIs("Succeeded", "status", "phase"))
	out := kubectl("", "get", "fdeploy", "web", "-n", "e2e", "-o", "jsonpath={.status.counts.succeeded}/{.status.counts.total} {.status.revision.generation}")
	if strings.TrimSpace(out) != "1/1 1" {
		t.Errorf("status says %q, want 1/1 succeeded at generation 1", out)
	}
	c, err := rt.Inspect(ctx, "web-"+device)
	if err != nil || c.State != runtime.StateRunning || c.Labels[agent.LabelGeneration] != "1" {
		t.Fatalf("container %+v, %v", c, err)
	}

	kubectl("", "delete", "fdeploy", "web", "-n", "e2e", "--wait=true")
	if testenv.Poll(context.Background(), 60*time.Second, func() bool {
		_, err := rt.Inspect(ctx, "web-"+device)
		return err != nil // removed
	}) != nil {
		t.Fatal("the container was not removed after the Deployment was deleted")
	}
}

package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/operator"
)

// TestAFailingHealthCheckIsRolledBackOnTheAgents: four agents on the
// simulated runtime converge on generation 1 of a Deployment applied with
// kubectl; generation 2 adds a health check that fails, a first batch of
// one device, manual approval and onFailure Rollback. The first batch waits
// for the approval (a kubectl annotation), its device runs generation 2
// and reports it Failed once the check fails, and the operator hands it
// generation 1 back: the agent runs generation 1 again, and the other three
// devices never leave it.
func TestAFailingHealthCheckIsRolledBackOnTheAgents(t *testing.T) {
	srv := kubeapi.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nsrv, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	logger := quietLogger()
	runOperator(t, ctx, srv, st, kv, operator.Options{Logger: logger, StatusInterval: 200 * time.Millisecond, SeveralPerProcess: true})

	const image1, image2 = "registry.example.com/pe:v1", "registry.example.com/pe:v2"
	prefix := fmt.Sprintf("pe%d", os.Getpid())
	devices := []string{prefix + "-1", prefix + "-2", prefix + "-3", prefix + "-4"}
	runtimes := map[string]*sim.Runtime{}
	kubectl := kubectlFor(t, ctx, srv)
	ns := "e2e-" + prefix
	kubectl("", "create", "namespace", ns)
	for _, dev := range devices {
		kubectl(fmt.Sprintf("apiVersion: fleet.nationtech.io/v1alpha1\nkind: Device\nmetadata: {name: %s, labels: {role: %s}}\nspec: {identitySubject: \"sub-%s\"}\n",
			dev, prefix, dev), "apply", "-n", ns, "-f", "-")
		rt := sim.New(sim.Options{LocalImages: []string{image1, image2}})
		runtimes[dev] = rt
		nc := natstest.Connect(t, nsrv, nats.CustomInboxPrefix("_INBOX_"+dev))
		agCtx, stopAgent := context.WithCancel(ctx)
		agDone := make(chan error, 1)
		rec := &agent.Reconciler{Runtime: rt, Log: logger, StopTimeout: time.Second}
		go func() {
			agDone <- agent.Run(agCtx, agent.Options{Device: dev, Conn: nc, Reconciler: rec, Logger: logger})
		}()
		defer func() { stopAgent(); <-agDone }()
	}
	generation := func(dev string) string {
		c, err := runtimes[dev].Inspect(ctx, "pe")
		if err != nil || c.State != runtime.StateRunning {
			return ""
		}
		return c.Labels[agent.LabelGeneration]
	}
	manifest := func(image, rollout, healthcheck string) string {
		return fmt.Sprintf(`apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata: {name: pe}
spec:
  targetSelector: {matchLabels: {role: %s}}
%s  score:
    type: PodmanV0
    data:
      services:
        - name: pe
          image: %s
%s`, prefix, rollout, image, healthcheck)
	}

	kubectl(manifest(image1, "", ""), "apply", "-n", ns, "-f", "-")
	waitObject(t, ctx, srv, ns, "fdeploy/pe", "become Ready", conditionIs("Ready", "True"))
	for _, dev := range devices {
		if g := generation(dev); g != "1" {
			t.Fatalf("%s runs generation %q after generation 1 succeeded", dev, g)
		}
	}

	kubectl(manifest(image2, `  rollout:
    batches: [{count: 1}]
    approval: Manual
    onFailure: Rollback
`, `          healthcheck: {command: ["false"], interval: 1s, retries: 1}
`), "apply", "-n", ns, "-f", "-")
	waitObject(t, ctx, srv, ns, "fdeploy/pe", "await the approval of batch 1", fieldIs("1", "status", "plan", "awaitingApproval"))
	for _, dev := range devices {
		if g := generation(dev); g != "1" {
			t.Fatalf("%s runs generation %q before the first batch was approved", dev, g)
		}
	}
	kubectl("", "annotate", "fdeploy/pe", "-n", ns, "--overwrite",
		`fleet.nationtech.io/rollout-action={"action":"approve","generation":2,"batch":1,"by":"e2e","request":"e2e-approve-1"}`)
	waitObject(t, ctx, srv, ns, "fdeploy/pe", "roll back to generation 1", fieldIs("1", "status", "plan", "rolledBackTo"))
	out := kubectl("", "get", "fdeploy/pe", "-n", ns, "-o", `jsonpath={.status.phase} {.status.conditions[?(@.type=="Ready")].reason} {.status.latestFailure.device}`)
	if want := "Failed RolledBack " + devices[0]; strings.TrimSpace(out) != want {
		t.Errorf("status %q, want %q", out, want)
	}
	if err := testenv.Poll(ctx, 60*time.Second, func() bool { return generation(devices[0]) == "1" }); err != nil {
		t.Fatalf("%s was not handed generation 1 back: it runs %q", devices[0], generation(devices[0]))
	}
	for _, dev := range devices[1:] {
		if g := generation(dev); g != "1" {
			t.Errorf("%s runs generation %q; it was never handed generation 2", dev, g)
		}
	}
	if c, err := runtimes[devices[0]].Inspect(ctx, "pe"); err != nil || c.Image != image1 {
		t.Errorf("%s runs %+v (%v), want %s again", devices[0], c, err, image1)
	}
}

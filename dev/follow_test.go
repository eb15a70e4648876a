package dev_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/containers"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// followDeployment is a Deployment with spec.rollout.targets Follow (ADR
// 0026) selecting follow-test=DEV.
const followDeployment = `apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata:
  name: DEV
spec:
  allowedGroups: [lab]
  targetSelector:
    matchLabels:
      follow-test: DEV
  rollout:
    strategy: Immediate
    targets: Follow
  score:
    type: PodmanV0
    data:
      services:
        - name: DEV
          image: IMAGE
          ports: []
          env: []
          secret_env: []
          volumes: []
          restart_policy: unless-stopped
`

// TestAFollowDeploymentRunsOnADeviceEnrolledAfterItSucceeded is issue
// #34's done-when in fleet dev: a Follow Deployment succeeds on a
// simulated device; a device enrolled afterwards with `fleet enroll --dev`
// and matching labels, its real fleet-agent on Podman, runs it with no
// change to the Deployment, and `fleet history deployment` says why; the
// device relabelled loses it (its container is removed).
func TestAFollowDeploymentRunsOnADeviceEnrolledAfterItSucceeded(t *testing.T) {
	r := newAttachRig(t, "follow", `CMD ["sh", "-c", "trap 'exit 0' TERM INT; sleep 2147483647 & wait"]`+"\n", "follow")
	conn, dev, image, p := r.conn, r.dev, r.image, r.p
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	// The Follow Deployment succeeds on the simulated device.
	kubectl(t, ctx, p.in, "label", "fdev", "-n", "lab", "sim-1", "follow-test="+dev)
	manifest := filepath.Join(t.TempDir(), "deployment.yaml")
	if err := os.WriteFile(manifest, []byte(strings.NewReplacer("DEV", dev, "IMAGE", image).Replace(followDeployment)), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl(t, ctx, p.in, "apply", "-n", "lab", "-f", manifest)
	status := func() string {
		return kubectl(t, ctx, p.in, "get", "fdeploy", "-n", "lab", dev, "-o",
			"jsonpath={.metadata.generation} {.status.phase} {.status.counts.total}/{.status.counts.succeeded} followers={.status.followers[*].device} removed={.status.removed[*].device}")
	}
	var got string
	if err := testenv.Poll(ctx, 3*time.Minute, func() bool {
		got = status()
		return got == "1 Succeeded 1/1 followers= removed="
	}); err != nil {
		t.Fatalf("the Follow Deployment did not succeed on sim-1: %q (%v)", got, err)
	}

	// A device enrolled afterwards with matching labels, its agent on
	// Podman, runs it: no change to the Deployment (generation 1).
	_, line := r.enroll(t, ctx, "follow-test="+dev)
	a := r.startAgent(t, line)
	defer a.stop(t)
	if err := testenv.Poll(ctx, 3*time.Minute, func() bool {
		got = status()
		return got == "1 Succeeded 2/2 followers="+dev+" removed="
	}); err != nil {
		t.Fatalf("the enrolled device did not converge as a follower: %q (%v)\nagent:\n%s", got, err, tail(a.logs.String(), 4000))
	}
	running := func() bool {
		list, err := containers.List(conn, new(containers.ListOptions).WithFilters(map[string][]string{"label": {"fleet.nationtech.io/device=" + dev}}))
		if err != nil {
			t.Fatal(err)
		}
		return len(list) > 0
	}
	// Polled: one Podman listing can miss a container while another test
	// process removes its own.
	if err := testenv.Poll(ctx, 30*time.Second, running); err != nil {
		t.Errorf("the follower converged but no container of it runs on Podman (%v)", err)
	}
	if hist, err := p.script(ctx, "fleet history deployment lab/"+dev); err != nil || !strings.Contains(hist, "target "+dev+" joined after the freeze: Device created") {
		t.Errorf("fleet history deployment lab/%s (%v) does not say why the device joined:\n%s", dev, err, hist)
	}

	// Relabelled, it leaves after the debounce and its container goes.
	kubectl(t, ctx, p.in, "label", "fdev", "-n", "lab", dev, "follow-test=elsewhere", "--overwrite")
	if err := testenv.Poll(ctx, 3*time.Minute, func() bool { return !running() }); err != nil {
		t.Fatalf("the relabelled device's container still runs (%v)\nagent:\n%s", err, tail(a.logs.String(), 4000))
	}
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		got = status()
		return got == "1 Succeeded 1/1 followers= removed="+dev
	}); err != nil {
		t.Errorf("the status after the departure: %q (%v)", got, err)
	}
	if hist, err := p.script(ctx, "fleet history deployment lab/"+dev); err != nil || !strings.Contains(hist, "target "+dev+" left, its workload is removed: labels no longer match the target selector: follow-test=elsewhere (was follow-test="+dev+")") {
		t.Errorf("fleet history deployment lab/%s (%v) does not say why the device left:\n%s", dev, err, hist)
	}
}

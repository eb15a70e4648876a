package dev_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// TestDevShowsTheCrashLoopDegradedAndTheTypoStalled is issue #32's "done
// when" in `fleet dev --runtime podman`: examples/crashloop.yaml (a
// service that exits with code 2 at start, restarted by Podman) succeeds,
// then shows Degraded with the exit code and restart count in kubectl get
// fdeploy, fleet history and the dashboard, and podman-1's Device shows
// the container; examples/typo-image.yaml (an image name with
// a typo) reports ProgressDeadlineExceeded after its 1-minute deadline,
// naming podman-1's one-line pull error (also on the dashboard), and the gauges of both alerts are
// set on the operator's metrics endpoint fleet dev prints.
func TestDevShowsTheCrashLoopDegradedAndTheTypoStalled(t *testing.T) {
	testenv.Exclusive(t, testenv.PodmanExamples)
	needKube(t)
	natsCLI(t)
	sock, _, mine := podmanDevice(t)
	p := startDev(t, t.TempDir(), "--devices", "2", "--runtime", "podman", "--podman-socket", sock)
	defer p.stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()

	began := time.Now()
	out, err := p.script(ctx, `
kubectl apply -n lab -f examples/crashloop.yaml -f examples/typo-image.yaml
kubectl wait -n lab fdeploy/crashloop-demo --for=jsonpath='{.status.phase}'=Succeeded --timeout=2m
kubectl wait -n lab fdeploy/crashloop-demo --for=condition=Degraded --timeout=2m
kubectl get fdeploy -n lab crashloop-demo
kubectl get fdeploy -n lab crashloop-demo -o jsonpath='{.status.conditions[?(@.type=="Degraded")].message}{"\n"}'
fleet history deployment lab/crashloop-demo`)
	if err != nil {
		t.Fatalf("%v\n%s\nlogs:\n%s", err, out, tail(p.stderr.String(), 4000))
	}
	t.Logf("the crash loop was Degraded %s after the apply", time.Since(began).Round(time.Second))
	for _, want := range []string{"DEGRADED", "condition met", "podman-1 (crashloop: CrashLoop, exited with code 2, ",
		"podman-1 degraded: crashloop CrashLoop, exit 2, ", `last output "fatal: DB_PASSWORD is not set"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the crash loop's output lacks %q:\n%s", want, out)
		}
	}
	// The dashboard's Deployment page shows it too (HTML-escaped).
	dash := signInDashboard(t, ctx, p)
	if ok, page := dash.pageShowing(ctx, "/deployments/lab/crashloop-demo", 30*time.Second,
		"<strong>Degraded</strong>", "podman-1 (crashloop: CrashLoop, exited with code 2, "); !ok {
		t.Errorf("the dashboard's page of crashloop-demo does not show it Degraded: %s", page)
	}
	if row := rowOf(out, "crashloop-demo"); !strings.Contains(row, "Succeeded") {
		t.Errorf("kubectl get fdeploy shows %q, want the phase Succeeded (health never rewrites it)", row)
	}
	// The Device shows its containers (written at most once a minute).
	out, err = p.script(ctx, `
kubectl wait -n lab fdev/podman-1 --for=jsonpath='{.status.degradedWorkloads}'=1 --timeout=2m
kubectl get fdev -n lab podman-1 -o jsonpath='{range .status.workloads[?(@.deployment=="crashloop-demo")]}{.degraded} {range .containers[*]}{.name} restarts={.restarts} exit={.lastExit.code}{end}{end}{"\n"}'`)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "CrashLoop crashloop restarts=") || !strings.Contains(out, " exit=2") {
		t.Errorf("podman-1's Device status does not show the crash loop's container:\n%s", out)
	}
	dep := func(name string) map[string]string { return map[string]string{"namespace": "lab", "deployment": name} }
	if n, ok := metricSum(t, ctx, p.in.MetricsURL+"/operator", "fleet_deployment_degraded_devices", dep("crashloop-demo")); !ok || n != 1 {
		t.Errorf("fleet_deployment_degraded_devices of crashloop-demo = %v (exported: %v), want 1 (FleetDeploymentDegraded)", n, ok)
	}

	out, err = p.script(ctx, `
kubectl wait -n lab fdeploy/typo-image-demo --for=condition=Progressing=False --timeout=3m
kubectl get fdeploy -n lab typo-image-demo -o jsonpath='{.status.conditions[?(@.type=="Progressing")].reason}: {.status.conditions[?(@.type=="Progressing")].message}{"\n"}'`)
	if err != nil {
		t.Fatalf("%v\n%s\nlogs:\n%s", err, out, tail(p.stderr.String(), 4000))
	}
	for _, want := range []string{"ProgressDeadlineExceeded: ", "progress deadline (1m0s)", "podman-1 Pending since ",
		"registry unavailable, retrying: image localhost/fleet-examples/analysis-apii:v1"} {
		if !strings.Contains(out, want) {
			t.Errorf("the typo'd image's output lacks %q:\n%s", want, out)
		}
	}
	if ok, page := dash.pageShowing(ctx, "/deployments/lab/typo-image-demo", 30*time.Second,
		"<strong>Rollout stalled</strong>", "podman-1 Pending since "); !ok {
		t.Errorf("the dashboard's page of typo-image-demo does not show it stalled: %s", page)
	}
	if n, ok := metricSum(t, ctx, p.in.MetricsURL+"/operator", "fleet_rollout_progress_deadline_exceeded", dep("typo-image-demo")); !ok || n != 1 {
		t.Errorf("fleet_rollout_progress_deadline_exceeded of typo-image-demo = %v (exported: %v), want 1 (FleetRolloutProgressDeadlineExceeded)", n, ok)
	}

	if out, err := p.script(ctx, `kubectl delete -n lab fdeploy crashloop-demo typo-image-demo --wait`); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var left []string
	if err := testenv.Poll(ctx, 2*time.Minute, func() bool { left = mine(); return len(left) == 0 }); err != nil {
		t.Fatalf("podman-1's containers %v are still there 2 minutes after the Deployments were deleted (%v)", left, err)
	}
}

// rowOf is the line of out that starts with name (a kubectl get row).
func rowOf(out, name string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, name+" ") {
			return l
		}
	}
	return ""
}

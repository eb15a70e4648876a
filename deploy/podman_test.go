package deploy

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// demoImage is the image of the test's Deployment; the simulated device
// has it locally.
const (
	demoImage  = "localhost/fleet-demo/api:v1"
	demoImage2 = "localhost/fleet-demo/api:v2"
)

// containerArgs returns the rendered args of a Deployment's first
// container, with the $(VAR)s of vars expanded as the kubelet does.
func containerArgs(t *testing.T, objs []*unstructured.Unstructured, name string, vars map[string]string) []string {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() != "Deployment" || u.GetName() != name {
			continue
		}
		pt, _ := podTemplate(t, u)
		var args []string
		for _, a := range pt.Spec.Containers[0].Args {
			for k, v := range vars {
				a = strings.ReplaceAll(a, "$("+k+")", v)
			}
			if strings.Contains(a, "$(") {
				t.Fatalf("Deployment %s arg %q names a variable the test does not set", name, a)
			}
			args = append(args, a)
		}
		return args
	}
	t.Fatalf("no Deployment %s rendered", name)
	return nil
}

// configMapFile returns one file of a rendered (hash-suffixed) ConfigMap.
func configMapFile(t *testing.T, objs []*unstructured.Unstructured, prefix, file string) string {
	t.Helper()
	for _, u := range objs {
		if u.GetKind() == "ConfigMap" && strings.HasPrefix(u.GetName(), prefix+"-") {
			if v, ok, _ := unstructured.NestedString(u.Object, "data", file); ok {
				return v
			}
		}
	}
	t.Fatalf("no ConfigMap %s with %s rendered", prefix, file)
	return ""
}

// replaceArg replaces the arg with the given flag prefix, or appends it.
func replaceArg(args []string, prefix, value string) []string {
	for i, a := range args {
		if strings.HasPrefix(a, prefix) {
			args[i] = prefix + value
			return args
		}
	}
	return append(args, prefix+value)
}

// writeFile writes content into dir/name, readable by the containers'
// user 65532.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// startNATS runs nats-server in this process from the single-node
// overlay's rendered configuration (the documented callout block
// included), on a free loopback port with a temporary store.
func startNATS(t *testing.T, objs []*unstructured.Unstructured, v calloutVars) *server.Server {
	t.Helper()
	v.setenv(t, "nats-0")
	opts, err := server.ProcessConfigFile(natsConfig(t, objs))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.StoreDir, opts.PidFile = filepath.Join(dir, "jetstream"), filepath.Join(dir, "nats.pid")
	opts.NoSigs = true
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats-server did not start from the rendered configuration")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// kubeconfigFor writes a kubeconfig with a token of service account sa
// (namespace fleet-system), as the pod would use in a cluster.
func kubeconfigFor(t *testing.T, ctx context.Context, srv *kubeapi.Server, sa string) string {
	t.Helper()
	tok, err := srv.Kubectl(ctx, nil, "create", "token", sa, "-n", "fleet-system", "--duration", "2h")
	if err != nil {
		t.Fatal(err)
	}
	cfg := srv.RESTConfig()
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: test
  context: {cluster: test, user: %s}
current-context: test
`, cfg.Host, base64.StdEncoding.EncodeToString(cfg.CAData), sa, strings.TrimSpace(string(tok)), sa)
	return kc
}

// podman runs the podman CLI against the test Podman service.
func podman(ctx context.Context, args ...string) ([]byte, error) {
	sock, err := podmantest.SocketPath()
	if err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, "podman", append([]string{"--url", "unix://" + sock}, args...)...).CombinedOutput()
}

// runContainer starts image with the restricted settings of the manifests
// (read-only root, no capabilities, no privilege escalation, the image's
// non-root user) on the host network, with mounts host:container (read
// only), and returns its name.
func runContainer(t *testing.T, ctx context.Context, name, image string, mounts map[string]string, env map[string]string, args ...string) string {
	t.Helper()
	name = fmt.Sprintf("%s-%d", name, os.Getpid())
	run := []string{"run", "-d", "--name", name, "--network", "host", "--read-only", "--cap-drop", "ALL",
		"--security-opt", "no-new-privileges"}
	for k, v := range podmantest.Labels(t) {
		run = append(run, "--label", k+"="+v)
	}
	for h, c := range mounts {
		run = append(run, "-v", h+":"+c+":ro")
	}
	for k, v := range env {
		run = append(run, "-e", k+"="+v)
	}
	run = append(run, image)
	run = append(run, args...)
	if out, err := podman(ctx, run...); err != nil {
		t.Fatalf("podman run %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := podman(context.Background(), "logs", "--tail", "40", name)
			t.Logf("logs of %s:\n%s", name, out)
		}
		_, _ = podman(context.Background(), "rm", "-f", "-t", "5", name)
	})
	return name
}

func TestTheImagesRunUnderPodmanAndReconcileADeployment(t *testing.T) {
	srv := compose(t)
	podmantest.Connect(t) // skips (or fails in CI) without the Podman service
	imgs := images(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	objs := overlays[2].render(t) // single-node: the NATS configuration the server runs

	v := newCalloutVars(t)
	ns := startNATS(t, objs, v)
	natsURL := ns.ClientURL()

	op, err := devop.New(devop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opCtx, stopOP := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = op.Run(opCtx) })
	t.Cleanup(func() { stopOP(); wg.Wait() })

	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"NATS_URL": natsURL, "FLEET_OIDC_ISSUER": op.Issuer(), "FLEET_AUDIENCE": op.Audience(), "FLEET_STREAM_REPLICAS": "1"}

	// The callout: the rendered configuration file and args, its Secret's
	// files, the test server's URL.
	iseed, _ := v.issuer.Seed()
	xseed, _ := v.xkey.Seed()
	secrets := map[string]string{"callout-password": v.callout, "reader-password": v.reader, "sys-password": v.sys, "presence-password": v.sys,
		"issuer-seed": string(iseed), "xkey-seed": string(xseed)}
	for k, s := range secrets {
		writeFile(t, dir, "callout-secrets/"+k, s)
	}
	writeFile(t, dir, "callout/authcallout.json", configMapFile(t, objs, "fleet-authcallout", "authcallout.json"))
	calloutArgs := append(containerArgs(t, objs, "fleet-authcallout", vars), "-nats-url="+natsURL, "-metrics-addr=127.0.0.1:0")
	began := time.Now()
	// Two replicas, as the manifests run them: one NATS queue group.
	var callouts []string
	for _, r := range []string{"a", "b"} {
		callouts = append(callouts, runContainer(t, ctx, "fleet-authcallout-"+r, imgs["fleet-authcallout"].ref,
			map[string]string{filepath.Join(dir, "callout"): "/etc/fleet-authcallout/config", filepath.Join(dir, "callout-secrets"): "/etc/fleet-authcallout/secrets"},
			nil, calloutArgs...))
	}

	// The operator: a machine key with the role fleet-operator (the
	// Secret fleet-operator-nats), a token of its service account (the
	// RBAC of the manifests), the rendered args.
	uid, err := op.CreateMachineUser(ctx, "fleet-operator", authcallout.RoleOperator)
	if err != nil {
		t.Fatal(err)
	}
	kf, err := op.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := kf.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "operator-nats/key.json", string(raw))
	writeFile(t, dir, "operator-kube/kubeconfig", kubeconfigFor(t, ctx, srv, "fleet-operator"))
	writeFile(t, dir, "operator-presence/password", v.sys) // the Secret fleet-operator-presence
	opArgs := containerArgs(t, objs, "fleet-operator", vars)
	opArgs = replaceArg(opArgs, "--metrics-addr=", "0")
	opArgs = replaceArg(opArgs, "--health-addr=", "127.0.0.1:0")
	opArgs = append(opArgs, "--kubeconfig=/etc/fleet-operator/kube/kubeconfig", "--log-format=text")
	// Two replicas electing a leader with the Lease, as the manifests run
	// them.
	var operators []string
	for _, r := range []string{"a", "b"} {
		operators = append(operators, runContainer(t, ctx, "fleet-operator-"+r, imgs["fleet-operator"].ref,
			map[string]string{filepath.Join(dir, "operator-nats"): "/etc/fleet-operator/nats", filepath.Join(dir, "operator-kube"): "/etc/fleet-operator/kube",
				filepath.Join(dir, "operator-presence"): "/etc/fleet-operator/presence"},
			map[string]string{"POD_NAMESPACE": "fleet-system"}, opArgs...))
	}

	// A device: its Device resource, then its agent (simulated runtime,
	// in this process) through the callout container.
	devUID, err := op.CreateMachineUser(ctx, "device-dev-1")
	if err != nil {
		t.Fatal(err)
	}
	devKey, err := op.AddMachineKey(ctx, devUID, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Kubectl(ctx, nil, "create", "namespace", "podman-lab"); err != nil {
		t.Fatal(err)
	}
	device := fmt.Sprintf("apiVersion: fleet.nationtech.io/v1alpha1\nkind: Device\nmetadata:\n  name: dev-1\n  labels: {role: demo}\nspec:\n  identitySubject: %q\n", devUID)
	if out, err := srv.Kubectl(ctx, []byte(device), "apply", "-n", "podman-lab", "-f", "-"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	var dc *agent.DeviceConn
	if err := testenv.Poll(ctx, 3*time.Minute, func() bool {
		// Refused until the operator container registered the identity.
		dc, err = agent.Connect(ctx, agent.ConnectOptions{URL: natsURL, Key: &devKey, Device: "dev-1", Issuer: op.Issuer(), Audience: op.Audience()})
		return err == nil
	}); err != nil {
		t.Fatalf("the device never connected through the callout container: %v", err)
	}
	t.Cleanup(dc.Conn.Close)
	t.Logf("device connected %s after the containers started", time.Since(began).Round(time.Millisecond))
	agentCtx, stopAgent := context.WithCancel(context.Background())
	wg.Go(func() {
		_ = agent.Run(agentCtx, agent.Options{Device: "dev-1", Conn: dc.Conn, Labels: map[string]string{"role": "demo"}, AgentVersion: "deploy-test",
			Reconciler: &agent.Reconciler{Runtime: sim.New(sim.Options{LocalImages: []string{demoImage, demoImage2}}), Log: slog.New(slog.DiscardHandler)},
			Logger:     slog.New(slog.DiscardHandler)})
	})
	t.Cleanup(stopAgent)

	deployment := func(image string) []byte {
		return []byte(`apiVersion: fleet.nationtech.io/v1alpha1
kind: Deployment
metadata:
  name: demo
spec:
  targetSelector:
    matchLabels: {role: demo}
  rollout: {strategy: Immediate}
  score:
    type: PodmanV0
    data:
      services:
        - name: api
          image: ` + image + `
          ports: ["18080:8080"]
          restart_policy: always
`)
	}
	// succeeded waits until generation gen of the Deployment succeeded on
	// the device and returns how long that took from since.
	succeeded := func(gen int, since time.Time) time.Duration {
		t.Helper()
		var got string
		want := fmt.Sprintf("%d/Succeeded/1", gen)
		if err := testenv.Poll(ctx, 3*time.Minute, func() bool {
			out, err := srv.Kubectl(ctx, nil, "get", "fdeploy", "demo", "-n", "podman-lab", "-o",
				"jsonpath={.status.observedGeneration}/{.status.phase}/{.status.counts.succeeded}")
			got = string(out)
			return err == nil && got == want
		}); err != nil {
			t.Fatalf("generation %d of the Deployment did not succeed on the device: generation/phase/succeeded %q", gen, got)
		}
		return time.Since(since)
	}
	if out, err := srv.Kubectl(ctx, deployment(demoImage), "apply", "-n", "podman-lab", "-f", "-"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("Deployment Succeeded on the device %s after it was applied", succeeded(1, time.Now()).Round(time.Millisecond))

	// Fault: one callout replica is killed. New connects go to the other.
	killed := time.Now()
	if out, err := podman(ctx, "kill", callouts[0]); err != nil {
		t.Fatalf("podman kill %s: %v\n%s", callouts[0], err, out)
	}
	if err := testenv.Poll(ctx, time.Minute, func() bool {
		c, err := agent.Connect(ctx, agent.ConnectOptions{URL: natsURL, Key: &devKey, Device: "dev-1", Issuer: op.Issuer(), Audience: op.Audience()})
		if err != nil {
			return false
		}
		c.Conn.Close()
		return true
	}); err != nil {
		t.Fatalf("no device connect succeeded with one callout replica left: %v", err)
	}
	t.Logf("callout replica killed: a new device connect succeeded %s later", time.Since(killed).Round(time.Millisecond))

	// Fault: the leading operator is killed. The other takes the Lease and
	// the next generation rolls out.
	leader := ""
	testenv.Eventually(t, "one operator replica logs that it leads", time.Minute, func() bool {
		for _, c := range operators {
			out, _ := podman(ctx, "logs", c)
			if strings.Contains(string(out), "leading: the controllers and runners start") {
				leader = c
				return true
			}
		}
		return false
	})
	killed = time.Now()
	if out, err := podman(ctx, "kill", leader); err != nil {
		t.Fatalf("podman kill %s: %v\n%s", leader, err, out)
	}
	follower := operators[0]
	if follower == leader {
		follower = operators[1]
	}
	testenv.Eventually(t, "the other operator replica leads", 2*time.Minute, func() bool {
		out, _ := podman(ctx, "logs", follower)
		return strings.Contains(string(out), "leading: the controllers and runners start")
	})
	takeover := time.Since(killed)
	if out, err := srv.Kubectl(ctx, deployment(demoImage2), "apply", "-n", "podman-lab", "-f", "-"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("operator leader killed: the other replica led %s later (bound with the manifests' defaults: 23.8s); generation 2 Succeeded %s after the kill",
		takeover.Round(time.Millisecond), succeeded(2, killed).Round(time.Millisecond))

	// Deleting the Deployment: the operator appends the deletion and drops
	// its finalizer (a patch its role allows), and the object goes.
	if out, err := srv.Kubectl(ctx, nil, "delete", "fdeploy", "demo", "-n", "podman-lab", "--wait", "--timeout", "2m"); err != nil {
		t.Fatalf("the Deployment was not deleted: %v: %s", err, out)
	}

	// Nothing the operators asked the API server for was refused: the
	// role is enough, not merely enough for this test's checks.
	for _, c := range operators {
		out, _ := podman(ctx, "logs", c)
		if strings.Contains(strings.ToLower(string(out)), "forbidden") {
			t.Errorf("operator %s was refused by the API server:\n%s", c, out)
		}
	}

	// The operator container leads through the Lease its Role allows.
	out, err := srv.Kubectl(ctx, nil, "get", "lease", "fleet-operator", "-n", "fleet-system", "-o", "jsonpath={.spec.holderIdentity}")
	if err != nil || len(out) == 0 {
		t.Errorf("no leader holds the Lease fleet-operator: %q %v", out, err)
	}
	for name, img := range imgs {
		size, _ := strconv.ParseInt(img.size, 10, 64)
		t.Logf("image %s: %s, %.1f MB", name, img.id, float64(size)/1e6)
	}
}

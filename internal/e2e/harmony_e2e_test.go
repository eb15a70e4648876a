package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/podman"
	"github.com/nationtech/harmony-fleet/dev/baostandin"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/callouttest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/operator"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// The example application's fixed policy (examples/harmony_apply_deployment).
const (
	exampleNamespace  = "example"
	exampleName       = "example"
	exampleGroup      = "example-edge"
	exampleCIRole     = "example-ci"
	exampleDevicePfx  = "fleet/example"
	exampleDeviceRole = "fleet-group-" + exampleNamespace + "-" + exampleGroup // operator.DefaultGroupRolePrefix
	exampleKeyVarName = "HARMONY_ZITADEL_KEY_JSON"
)

// harmonyFleet is the whole product around one CI job: the NATS auth
// callout chain with the dev OpenID Provider, the OpenBao stand-in, the
// registry, the API server, the operator and two agents on real Podman
// (two engines, since the example's container names are fixed).
type harmonyFleet struct {
	t       *testing.T
	ctx     context.Context
	kube    dynamic.Interface
	bao     *baostandin.Server
	issuer  string
	ciKey   string
	secrets []string
	devices map[string]runtime.Runtime // device → its engine
	canary  string
	other   string
}

func TestHarmonyShipWaitsForTheRolloutOnRealPodmanAgents(t *testing.T) {
	testenv.Exclusive(t, testenv.PodmanExamples)
	srv := kubeapi.Shared(t)
	podmantest.Connect(t)
	reg := podmantest.TestRegistry(t)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f := &harmonyFleet{t: t, ctx: ctx, devices: map[string]runtime.Runtime{}}
	if f.kube, err = dynamic.NewForConfig(srv.RESTConfig()); err != nil {
		t.Fatal(err)
	}

	// Identity, NATS and the callout; OpenBao configured as docs/ci.md says.
	env := callouttest.Start(t)
	f.issuer = env.Provider.Issuer()
	f.bao = baostandin.Start(t)
	admin, err := openbao.NewWithToken(openbao.Config{Address: f.bao.URL()}, f.bao.RootToken())
	if err != nil {
		t.Fatal(err)
	}
	ciUser, err := env.Provider.CreateMachineUser(ctx, "example-ci")
	if err != nil {
		t.Fatal(err)
	}
	ciKey, err := env.Provider.AddMachineKey(ctx, ciUser, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := ciKey.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	f.ciKey = string(b)
	kubeconfig, err := os.ReadFile(srv.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	const apiToken = "example-api-token-7d1e"
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(admin.ConfigureJWT(ctx, f.issuer, ""))
	must(admin.PutPolicy(ctx, exampleCIRole, `path "secret/data/harmony/example/local/*" { capabilities = ["read"] }`))
	must(admin.PutJWTRole(ctx, exampleCIRole, openbao.JWTRole{BoundAudiences: []string{env.Provider.Audience()}, BoundSubject: ciUser, Policies: []string{exampleCIRole}}))
	// The tenant's own policy grants the application secret; the pull
	// secret is granted by the operator's policy sync, which adds the
	// Deployment's policy to the group's role.
	must(admin.PutPolicy(ctx, "example-app-secrets", `path "secret/data/example/backend" { capabilities = ["read"] }`))
	must(admin.PutJWTRole(ctx, exampleDeviceRole, openbao.JWTRole{BoundAudiences: []string{env.Provider.Audience()}, Policies: []string{"example-app-secrets"}}))
	must(admin.Write(ctx, "harmony/example/local/RegistryCredentials", map[string]any{"registry": reg.Addr, "username": reg.Username, "password": reg.Password}))
	must(admin.Write(ctx, "harmony/example/local/kubeconfig", map[string]any{"kubeconfig": string(kubeconfig)}))
	// The test registry has one account: it is both the push robot and the
	// device puller here.
	must(admin.Write(ctx, openbao.PullSecretPath(exampleDevicePfx, "example-pull"), map[string]any{"registry": reg.Addr, "username": reg.Username, "password": reg.Password}))
	must(admin.Write(ctx, "example/backend", map[string]any{"api_token": apiToken}))
	f.secrets = []string{reg.Password, ciKey.Key, f.bao.RootToken(), apiToken}
	if m := regexp.MustCompile(`client-key-data: (\S+)`).FindStringSubmatch(string(kubeconfig)); m != nil {
		f.secrets = append(f.secrets, m[1])
	}

	// The operator, with the example's device group.
	f.canary, f.other = fmt.Sprintf("hx-canary-%d", os.Getpid()), fmt.Sprintf("hx-other-%d", os.Getpid())
	opCtx, stopOp := context.WithCancel(ctx)
	opDone := make(chan error, 1)
	go func() {
		opDone <- operator.Run(opCtx, operator.Options{RESTConfig: srv.RESTConfig(), Store: env.Store, Reader: env.Store, IntentKV: env.Intent,
			Devices: env.Store, Logger: logger, StatusInterval: 200 * time.Millisecond, SeveralPerProcess: true, OpenBao: admin,
			Groups: operator.NewStaticGroups(map[string]map[string][]string{exampleNamespace: {exampleGroup: {f.canary, f.other}}})})
	}()
	defer func() { stopOp(); <-opDone }()

	f.createNamespace()
	sock, err := podmantest.SocketPath()
	if err != nil {
		t.Fatal(err)
	}
	f.startAgent(env, logger, f.canary, "unix://"+sock, map[string]string{"app": "example", "canary": "true"})
	f.startAgent(env, logger, f.other, f.secondPodman(), map[string]string{"app": "example"})

	// The application repository, checked out, and its harmony binary.
	work := t.TempDir()
	copyDir(t, filepath.Join(root, "examples", "harmony_apply_deployment"), work)
	bin := filepath.Join(t.TempDir(), "harmony")
	build := exec.CommandContext(ctx, "go", "build", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp",
		"-ldflags", fmt.Sprintf("-X main.localOpenBao=%s -X main.localZitadel=%s -X main.localRegistry=%s", f.bao.URL(), f.issuer, reg.Addr),
		"-o", bin, "./examples/harmony_apply_deployment")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build the example: %v\n%s", err, out)
	}
	home, tmp := t.TempDir(), t.TempDir()
	ship := func(tag string) (int, string, string) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, "ship", "--context", "local", "--tag", tag, "--wait", "--wait-timeout", "3m")
		cmd.Dir = work
		// Only what a CI runner has: a PATH, a HOME, a TMPDIR and the one
		// secret.
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + tmp, exampleKeyVarName + "=" + f.ciKey}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err := cmd.Run()
		t.Logf("harmony ship --tag %s took %s\nstdout:\n%s\nstderr:\n%s", tag, time.Since(start).Round(time.Millisecond), stdout.String(), stderr.String())
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		f.noSecretIn("stdout", stdout.String())
		f.noSecretIn("stderr", stderr.String())
		return code, stdout.String(), stderr.String()
	}

	f.waitForDeviceLabels()

	var first map[string]string
	t.Run("ship --wait exits 0 once every frozen target runs the pushed digests", func(t *testing.T) {
		code, stdout, _ := ship("c1")
		if code != 0 {
			t.Fatalf("exit %d", code)
		}
		first = printedDigests(t, stdout)
		// The canary stage may pass between two status reads, so the
		// guarantee is the final line's canary summary (from the counts the
		// status keeps), not a progress line caught in the Canary phase.
		if !strings.Contains(stdout, "succeeded: 2 of 2 targets converged (canary stage: 1 of 1 canaries converged before the release)") {
			t.Errorf("stdout shows no canary stage or no final count:\n%s", stdout)
		}
		for device, rt := range f.devices {
			f.runs(rt, device, map[string]string{"example-frontend": first["frontend"], "example-backend": first["backend"]}, runtime.StateRunning)
			f.runs(rt, device, map[string]string{"example-migrate": first["backend"]}, runtime.StateExited)
		}
		// The devices read the pull secret through the policy the operator
		// wrote for the Deployment and bound to the group's role.
		d, err := f.kube.Resource(schema.GroupVersionResource{Group: "fleet.nationtech.io", Version: "v1alpha1", Resource: "deployments"}).
			Namespace(exampleNamespace).Get(f.ctx, exampleName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		conds, _, _ := unstructured.NestedSlice(d.Object, "status", "conditions")
		synced := false
		for _, c := range conds {
			c, _ := c.(map[string]any)
			synced = synced || (c["type"] == "PullSecretPolicy" && c["reason"] == "PolicySynced")
		}
		if !synced {
			t.Errorf("no PullSecretPolicy=PolicySynced condition: %v", conds)
		}
	})
	if first == nil {
		return
	}

	t.Run("a broken image fails the wait with the canary's error and never reaches the other device", func(t *testing.T) {
		migrate := filepath.Join(work, "backend", "migrate.sh")
		good, err := os.ReadFile(migrate)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(migrate, []byte("#!/bin/sh\necho migration failed >&2\nexit 3\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := ship("c2")
		if code == 0 {
			t.Fatal("ship of a broken image exited 0")
		}
		for _, s := range []string{"failed", f.canary, "init container example-migrate exited with code 3", "of 2"} {
			if !strings.Contains(stderr, s) {
				t.Errorf("stderr does not say %q", s)
			}
		}
		broken := printedDigests(t, stdout)
		if broken["backend"] == first["backend"] || broken["frontend"] != first["frontend"] {
			t.Errorf("digests %v after changing only the backend, first %v", broken, first)
		}
		// The canary failed: the other device keeps the first revision.
		f.runs(f.devices[f.other], f.other, map[string]string{"example-backend": first["backend"]}, runtime.StateRunning)

		t.Run("shipping the repaired commit rolls forward", func(t *testing.T) {
			if err := os.WriteFile(migrate, good, 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, _ := ship("c3")
			if code != 0 {
				t.Fatalf("exit %d", code)
			}
			if repaired := printedDigests(t, stdout); repaired["backend"] != first["backend"] {
				t.Errorf("the repaired backend has digest %s, the first build %s (builds are reproducible)", repaired["backend"], first["backend"])
			}
			if !strings.Contains(stdout, "generation 3") {
				t.Errorf("the repair is not the third generation:\n%s", stdout)
			}
		})
	})

	t.Run("deploy of the running digests makes no new generation and waits for it", func(t *testing.T) {
		cmd := exec.CommandContext(ctx, bin, "deploy", "--context", "local", "--tag", "c3",
			"--image", "frontend="+first["frontend"], "--image", "backend="+first["backend"], "--wait", "--wait-timeout", "1m")
		cmd.Dir = work
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "TMPDIR=" + tmp, exampleKeyVarName + "=" + f.ciKey}
		out, err := cmd.CombinedOutput()
		t.Logf("harmony deploy:\n%s", out)
		if err != nil {
			t.Fatalf("deploy: %v", err)
		}
		f.noSecretIn("deploy output", string(out))
		if !strings.Contains(string(out), "generation 3 succeeded: 2 of 2") {
			t.Errorf("deploy of the running digests did not complete on generation 3")
		}
	})

	t.Run("no credential was left on disk", func(t *testing.T) {
		for _, dir := range []string{home, tmp, work} {
			f.noSecretUnder(dir)
		}
	})
}

// printedDigests reads ship's "image <name> <ref>" lines.
func printedDigests(t *testing.T, stdout string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^image (\w+) (\S+@sha256:[a-f0-9]{64})$`).FindAllStringSubmatch(stdout, -1) {
		out[m[1]] = m[2]
	}
	if out["frontend"] == "" || out["backend"] == "" {
		t.Fatalf("ship printed no frontend and backend digests:\n%s", stdout)
	}
	return out
}

// runs checks that device's containers exist in state with the images
// (name → image reference).
func (f *harmonyFleet) runs(rt runtime.Runtime, device string, want map[string]string, state runtime.State) {
	f.t.Helper()
	for name, image := range want {
		c, err := rt.Inspect(f.ctx, name)
		if err != nil {
			f.t.Errorf("device %s: %s: %v", device, name, err)
			continue
		}
		if c.Image != image || c.State != state || c.Labels[agent.LabelDevice] != device {
			f.t.Errorf("device %s: %s runs %s (%s, device label %s), want %s (%s)", device, name, c.Image, c.State, c.Labels[agent.LabelDevice], image, state)
		}
	}
}

func (f *harmonyFleet) createNamespace() {
	f.t.Helper()
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": exampleNamespace}}}
	_, err := f.kube.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(f.ctx, ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		f.t.Fatal(err)
	}
}

var devicesGVR = schema.GroupVersionResource{Group: "fleet.nationtech.io", Version: "v1alpha1", Resource: "devices"}

// startAgent enrolls device, creates its Device resource and runs an agent
// on the Podman engine at uri, reading its secrets from OpenBao with its
// own id_token.
func (f *harmonyFleet) startAgent(env *callouttest.Env, logger *slog.Logger, device, uri string, labels map[string]string) {
	t := f.t
	t.Helper()
	keyPath := env.EnrollDevice(t, device)
	key, err := credential.ReadKeyFile(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	dev := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "fleet.nationtech.io/v1alpha1", "kind": "Device",
		"metadata": map[string]any{"name": device, "namespace": exampleNamespace}, "spec": map[string]any{"identitySubject": key.UserID}}}
	if _, err := f.kube.Resource(devicesGVR).Namespace(exampleNamespace).Create(f.ctx, dev, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	src, err := credential.New(f.ctx, credential.Options{Issuer: key.Issuer, Key: key, Audience: key.Audience})
	if err != nil {
		t.Fatal(err)
	}
	bao, err := openbao.New(openbao.Config{Address: f.bao.URL(), Role: exampleDeviceRole})
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := openbao.NewDeviceSecrets(bao, src.IDToken, exampleDevicePfx)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := podman.New(f.ctx, podman.Options{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	f.removeLeftovers(rt)
	nc, err := nats.Connect(env.NATS.ClientURL(), append(src.NATSOptions(device), nats.MaxReconnects(-1))...)
	if err != nil {
		t.Fatal(err)
	}
	rec := &agent.Reconciler{Runtime: rt, Device: device, Secrets: secrets, Credentials: secrets, Log: logger, StopTimeout: 10 * time.Second,
		EnsureHostPath: func(p string) error { return os.MkdirAll(p, 0o755) }}
	actx, stop := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() {
		done <- agent.Run(actx, agent.Options{Device: device, Conn: nc, Reconciler: rec, Logger: logger, Labels: labels})
	}()
	t.Cleanup(func() {
		stop()
		<-done
		nc.Close()
		if err := rec.Remove(context.Background(), exampleNamespace, exampleName); err != nil {
			t.Errorf("remove %s's containers: %v", device, err)
		}
	})
	f.devices[device] = rt
}

// removeLeftovers removes the example's containers left on an engine by
// agents of an earlier, killed run of this test.
func (f *harmonyFleet) removeLeftovers(rt runtime.Runtime) {
	f.t.Helper()
	list, err := rt.List(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, c := range list {
		if c.Labels[agent.LabelNamespace] == exampleNamespace && strings.HasPrefix(c.Labels[agent.LabelDevice], "hx-") {
			if err := rt.Remove(f.ctx, c.ID, true); err != nil {
				f.t.Fatalf("remove leftover %s: %v", c.Name, err)
			}
		}
	}
}

// secondPodman starts a Podman API service with its own storage (the
// second device's engine) and returns its URI. It shares the machine's
// configuration, registry trust and network.
func (f *harmonyFleet) secondPodman() string {
	t := f.t
	t.Helper()
	dir, err := os.MkdirTemp("", "hxb-") // short: unix socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	storage := []string{"--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"), "--tmpdir", filepath.Join(dir, "tmp")}
	sock := filepath.Join(dir, "podman.sock")
	logFile, err := os.Create(filepath.Join(dir, "service.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("podman", append(storage, "system", "service", "--time=0", "unix://"+sock)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("start a second Podman service: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		for _, args := range [][]string{{"rm", "--all", "--force", "--time", "0"}, {"rmi", "--all", "--force"}} {
			if out, err := exec.Command("podman", append(storage, args...)...).CombinedOutput(); err != nil {
				t.Logf("podman %v on the second engine: %v\n%s", args, err, out)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("remove the second engine's storage: %v", err)
		}
	})
	if testenv.Poll(context.Background(), 30*time.Second, func() bool {
		if _, err := os.Stat(sock); err != nil {
			return false
		}
		rt, err := podman.New(f.ctx, podman.Options{URI: "unix://" + sock})
		if err != nil {
			return false
		}
		_, err = rt.List(f.ctx)
		return err == nil
	}) != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "service.log"))
		t.Fatalf("the second Podman service did not answer within 30s:\n%s", log)
	}
	return "unix://" + sock
}

// waitForDeviceLabels waits until the operator copied each device's
// self-reported labels onto its Device resource (placement needs them).
func (f *harmonyFleet) waitForDeviceLabels() {
	f.t.Helper()
	testenv.EventuallyErr(f.t, "every device's app=example label", 90*time.Second, func() error {
		for _, device := range slices.Sorted(maps.Keys(f.devices)) {
			d, err := f.kube.Resource(devicesGVR).Namespace(exampleNamespace).Get(f.ctx, device, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("device %s: %w", device, err)
			}
			if got := d.GetLabels()["app"]; got != "example" {
				return fmt.Errorf("device %s has app=%q", device, got)
			}
		}
		return nil
	})
}

func (f *harmonyFleet) noSecretIn(what, s string) {
	f.t.Helper()
	for _, v := range f.secrets {
		if v != "" && strings.Contains(s, v) {
			f.t.Errorf("%s contains a secret value", what)
		}
	}
}

func (f *harmonyFleet) noSecretUnder(dir string) {
	f.t.Helper()
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(path); err == nil {
			f.noSecretIn(path, string(b))
		}
		return nil
	})
}

// copyDir copies the regular files of src into dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

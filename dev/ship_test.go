package dev_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings"
	"github.com/containers/podman/v5/pkg/bindings/containers"

	"github.com/nationtech/harmony-fleet/dev"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

var (
	reShipBuild  = regexp.MustCompile(`(?m)^  (go build -tags containers_image_openpgp (?:-ldflags "[^"]*" )?-o (\S+)/harmony \./examples/harmony_apply_deployment)$`)
	reShipExport = regexp.MustCompile(`(?m)^  (export HARMONY_ZITADEL_KEY_JSON="\$\(cat (\S+)\)")$`)
	reShipCmd    = regexp.MustCompile(`(?m)^  (cd examples/harmony_apply_deployment && harmony ship --context dev --tag t1 --wait)$`)
	reShipDigest = regexp.MustCompile(`(?m)^image (frontend|backend) (\S+/example/(?:frontend|backend)@sha256:[a-f0-9]{64})$`)
	reShipApply  = regexp.MustCompile(`(?m)^applied Deployment lab/example uid (\S+) generation (\d+)$`)
)

// TestHarmonyShipOfTheReferenceProgramRunsOnFleetDevAsPrinted is docs/fleet.md's
// "Ship from a laptop as CI would": the real fleet binary's `dev` with a
// Podman device and simulated ones, then, in a new shell, the printed PATH
// line and the printed build, export and ship lines exactly: the reference
// program builds with buildah, pushes to the registry, applies and waits
// until every device runs the digests; a second ship of the same tag makes
// no new generation.
func TestHarmonyShipOfTheReferenceProgramRunsOnFleetDevAsPrinted(t *testing.T) {
	testenv.Exclusive(t, testenv.PodmanExamples)
	reg, goBin, sock, conn := shipPrerequisites(t)

	p := startDev(t, t.TempDir(), "--devices", "2", "--runtime", "podman", "--podman-socket", sock)
	defer p.stop(t)
	build, export, ship := reShipBuild.FindStringSubmatch(p.out), reShipExport.FindStringSubmatch(p.out), reShipCmd.FindStringSubmatch(p.out)
	if build == nil || export == nil || ship == nil {
		t.Fatalf("fleet dev's output lacks the build, export or ship line:\n%s", p.out)
	}
	if build[2] != p.in.BinDir {
		t.Errorf("the build line writes harmony to %s, want the printed PATH's %s", build[2], p.in.BinDir)
	}
	if want := filepath.Join(p.dataDir, "secrets", dev.ShipKeyFileName); export[2] != want {
		t.Errorf("the export line reads %s, want %s", export[2], want)
	}
	if fi, err := os.Stat(export[2]); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the CI machine key file: %v (mode %v), want mode 0600", err, fi)
	}
	key, err := credential.ReadKeyFile(export[2])
	if err != nil {
		t.Fatal(err)
	}
	root, err := os.ReadFile(p.in.OpenBaoTokenFile)
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{reg.Password, key.Key, strings.TrimSpace(string(root))}
	noSecret := func(what, s string) {
		t.Helper()
		for _, v := range secrets {
			if v != "" && strings.Contains(s, v) {
				t.Errorf("%s contains a secret value", what)
			}
		}
	}
	ciKubeconfig := readKubeconfig(t, p.in.OpenBaoAddr, strings.TrimSpace(string(root)))
	if m := regexp.MustCompile(`token: (\S+)`).FindStringSubmatch(ciKubeconfig); m != nil {
		secrets = append(secrets, m[1])
	} else {
		t.Errorf("the CI kubeconfig holds no token")
	}
	noSecret("fleet dev's output", p.out)
	t.Run("the CI kubeconfig may only get, create and patch the namespace's Deployments", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "ci.kubeconfig")
		if err := os.WriteFile(file, []byte(ciKubeconfig), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			verb, resource, namespace, want string
		}{
			{"get", "deployments.fleet.nationtech.io", "lab", "yes"},
			{"create", "deployments.fleet.nationtech.io", "lab", "yes"},
			{"patch", "deployments.fleet.nationtech.io", "lab", "yes"},
			{"delete", "deployments.fleet.nationtech.io", "lab", "no"},
			{"get", "deployments.fleet.nationtech.io", "default", "no"},
			{"get", "secrets", "lab", "no"},
			{"patch", "devices.fleet.nationtech.io", "lab", "no"},
		} {
			out, _ := exec.Command(p.in.Kubectl, "--kubeconfig", file, "auth", "can-i", tc.verb, tc.resource, "-n", tc.namespace).Output()
			if got := strings.TrimSpace(string(out)); got != tc.want {
				t.Errorf("can-i %s %s -n %s: %q, want %s", tc.verb, tc.resource, tc.namespace, got, tc.want)
			}
		}
	})

	gocache, err := exec.Command(goBin, "env", "GOCACHE", "GOMODCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	caches := strings.Fields(string(gocache))
	// The new shell has Go (and this machine's Go caches) besides what
	// fleet dev printed.
	toolchain := "export PATH=\"$PATH:" + filepath.Dir(goBin) + "\" CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOCACHE=" + caches[0] + " GOMODCACHE=" + caches[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := shipScript(ctx, p, toolchain+"\n"+build[1]+"\n"+export[1]+"\n"+ship[1])
	t.Logf("build and first ship took %s:\n%s", time.Since(start).Round(time.Millisecond), out)
	noSecret("the ship's output", out)
	if err != nil {
		t.Fatalf("the printed ship lines failed: %v\n%s\nfleet dev's logs:\n%s", err, kubectl(t, ctx, p.in, "get", "fdeploy", "-n", "lab", "example", "-o", "yaml"),
			tail(p.stderr.String(), 4000))
	}
	digests := map[string]string{}
	for _, m := range reShipDigest.FindAllStringSubmatch(out, -1) {
		digests[m[1]] = m[2]
	}
	applied := reShipApply.FindStringSubmatch(out)
	if digests["frontend"] == "" || digests["backend"] == "" || applied == nil {
		t.Fatalf("ship printed no frontend and backend digests or no applied line:\n%s", out)
	}
	for name, ref := range digests {
		if !strings.HasPrefix(ref, reg.Addr+"/example/"+name+"@") {
			t.Errorf("image %s is %s, want it in %s/example", name, ref, reg.Addr)
		}
	}
	if !strings.Contains(out, "rollout generation "+applied[2]+" succeeded: 3 of 3 targets converged") {
		t.Errorf("the ship does not end with the 3 devices converged:\n%s", out)
	}
	if got := kubectl(t, ctx, p.in, "get", "fdeploy", "-n", "lab", "example", "-o", "jsonpath={.status.phase}"); got != "Succeeded" {
		t.Errorf("the Deployment's phase is %q, want Succeeded", got)
	}
	for name, image := range map[string]string{"example-frontend": digests["frontend"], "example-backend": digests["backend"], "example-migrate": digests["backend"]} {
		c, err := containers.Inspect(conn, name, nil)
		if err != nil {
			t.Errorf("podman-1 runs no %s: %v", name, err)
			continue
		}
		if c.Config.Labels["fleet.nationtech.io/device"] != dev.PodmanDevice || c.ImageName != image {
			t.Errorf("%s runs %s on device %q, want %s on %s", name, c.ImageName, c.Config.Labels["fleet.nationtech.io/device"], image, dev.PodmanDevice)
		}
	}

	t.Run("the dev context signed every image and the Deployment trusts its key", func(t *testing.T) {
		got := kubectl(t, ctx, p.in, "get", "fdeploy", "-n", "lab", "example", "-o", "jsonpath={.spec.signatures.keys[*].name}")
		if got != dev.ShipSigningKeyName {
			t.Errorf("spec.signatures names the keys %q, want %q", got, dev.ShipSigningKeyName)
		}
		admin, err := openbao.NewWithToken(openbao.Config{Address: p.in.OpenBaoAddr}, strings.TrimSpace(string(root)))
		if err != nil {
			t.Fatal(err)
		}
		pubs, err := admin.TransitPublicKeys(ctx, dev.ShipTransitMount, dev.ShipTransitKey("lab"))
		if err != nil {
			t.Fatalf("fleet dev's transit signing key: %v", err)
		}
		if got := kubectl(t, ctx, p.in, "get", "fdeploy", "-n", "lab", "example", "-o", "jsonpath={.spec.signatures.keys[0].publicKey}"); strings.TrimSpace(got) != strings.TrimSpace(pubs[1]) {
			t.Errorf("spec.signatures trusts %q, want the transit key's version 1 %q", got, pubs[1])
		}
		noSecret("fleet dev's output", p.out)
		noSecret("the ship's output", out)
	})
	t.Run("a second ship of the same tag makes no new generation", func(t *testing.T) {
		out, err := shipScript(ctx, p, export[1]+"\n"+ship[1])
		noSecret("the second ship's output", out)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		again := reShipApply.FindStringSubmatch(out)
		if again == nil || again[1] != applied[1] || again[2] != applied[2] {
			t.Errorf("the second ship applied %v, want uid %s generation %s:\n%s", again, applied[1], applied[2], out)
		}
		for _, m := range reShipDigest.FindAllStringSubmatch(out, -1) {
			if digests[m[1]] != m[2] {
				t.Errorf("image %s is %s the second time, %s the first (builds are reproducible)", m[1], m[2], digests[m[1]])
			}
		}
	})
	t.Run("an unsigned image under the same tag fails on the devices and the running version keeps running", func(t *testing.T) {
		unsignedDeploy(t, ctx, p, reg, conn, export[1], digests)
	})
}

// an unsignedDeploy is issue #38's proof in fleet dev: an unsigned image
// pushed under the tag ship signed, deployed by its digest, fails on the
// devices with a reason naming the missing signature, and the running
// version keeps running. It runs after the ship of
// TestHarmonyShipOfTheReferenceProgramRunsOnFleetDevAsPrinted converged.
func unsignedDeploy(t *testing.T, ctx context.Context, p *devProc, reg podmantest.Registry, conn context.Context, export string, digests map[string]string) {
	unsigned := podmantest.PushImageAs(t, reg, reg.Addr+"/example/frontend:t1",
		"FROM "+podmantest.BaseImage+"\nLABEL fleet.test.unsigned=true\nCMD [\"sleep\", \"3600\"]\n")
	_, unsignedDigest, _ := strings.Cut(unsigned, "@")
	out, err := shipScript(ctx, p, export+"\ncd examples/harmony_apply_deployment && harmony deploy --context dev --tag t2 --image frontend="+
		unsigned+" --image backend="+digests["backend"])
	if err != nil {
		t.Fatalf("harmony deploy: %v\n%s", err, out)
	}
	var failure string
	testenv.Eventually(t, "both canaries (podman-1 and sim-1) report the unsigned revision failed", 3*time.Minute, func() bool {
		failure = kubectl(t, ctx, p.in, "get", "fdeploy", "-n", "lab", "example", "-o",
			"jsonpath={.status.counts.canariesFailed} {.status.latestFailure.error}")
		return strings.HasPrefix(failure, "2 ")
	})
	for _, want := range []string{"service example-frontend: image " + unsigned + " (digest " + unsignedDigest + ") is not signed by a trusted key",
		"the registry holds no signature for this digest", "keys tried: " + dev.ShipSigningKeyName + " (sha256:"} {
		if !strings.Contains(failure, want) {
			t.Errorf("the device's failure %q does not say %q", failure, want)
		}
	}
	c, err := containers.Inspect(conn, "example-frontend", nil)
	if err != nil || c.ImageName != digests["frontend"] || !c.State.Running {
		t.Errorf("podman-1's example-frontend: %v; want the signed %s still running", err, digests["frontend"])
	} else if c.ImageName == unsigned {
		t.Errorf("podman-1 runs the unsigned image")
	}
}

// readKubeconfig reads the CI kubeconfig fleet dev stored in the stand-in.
func readKubeconfig(t *testing.T, addr, rootToken string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, addr+"/v1/secret/data/harmony/lab/dev/kubeconfig", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Vault-Token", rootToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Data struct {
			Data struct {
				Kubeconfig string `json:"kubeconfig"`
			} `json:"data"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK || body.Data.Data.Kubeconfig == "" {
		t.Fatalf("read the CI kubeconfig from the stand-in: %s, %v", resp.Status, err)
	}
	return body.Data.Data.Kubeconfig
}

// foreignExampleContainers are the containers named as the reference
// program's that a device other than podman-1 runs.
func foreignExampleContainers(t *testing.T, conn context.Context) []string {
	t.Helper()
	list, err := containers.List(conn, new(containers.ListOptions).WithAll(true))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range list {
		device := c.Labels["fleet.nationtech.io/device"]
		for _, n := range c.Names {
			if (n == "example-frontend" || n == "example-backend" || n == "example-migrate") && device != dev.PodmanDevice {
				out = append(out, n+" of device "+device)
			}
		}
	}
	return out
}

// shipScript runs script in a new shell after the printed PATH line, from
// the repository root, as (*devProc).script does, with a longer deadline:
// the first build of the reference program compiles client-go.
func shipScript(ctx context.Context, p *devProc, script string) (string, error) {
	home, err := os.MkdirTemp("", "fleet-dev-home-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(home)
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", rePATH.FindStringSubmatch(p.out)[1]+"\n"+script)
	cmd.Dir = filepath.Dir(mustAbs("."))
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "PATH" && name != "KUBECONFIG" && name != dev.ShipKeyVariable && !strings.HasPrefix(name, "NATS_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env, "PATH="+systemPATH, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

// TestTheDevContextDefaultsAreFleetDevsDefaults checks that the reference
// program compiles in the addresses fleet dev takes by default.
func TestTheDevContextDefaultsAreFleetDevsDefaults(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "examples", "harmony_apply_deployment", "main.go"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, variable, want string }{
		{"the issuer is the provider's default address", "devZitadel", dev.DefaultShipIssuer},
		{"the OpenBao URL is the stand-in's default address", "devOpenBao", dev.DefaultShipOpenBao},
		{"the registry is task setup:podman's default address", "devRegistry", dev.DefaultShipRegistry},
		{"the namespace is fleet dev's default namespace", "devNamespace", dev.DefaultShipNamespace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := regexp.MustCompile(`(?m)^\s*` + tc.variable + `\s*=\s*"([^"]*)"$`).FindSubmatch(src)
			if m == nil || string(m[1]) != tc.want {
				t.Errorf("main.%s is %q, want %q", tc.variable, m, tc.want)
			}
		})
	}
	for _, tc := range []struct{ name, got, want string }{
		{"the issuer names the default provider port", dev.DefaultShipIssuer, "http://127.0.0.1:" + strconv.Itoa(dev.DefaultProviderPort)},
		{"the OpenBao URL names the default stand-in port", dev.DefaultShipOpenBao, "http://127.0.0.1:" + strconv.Itoa(dev.DefaultOpenBaoPort)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.got != tc.want {
				t.Errorf("%s, want %s", tc.got, tc.want)
			}
		})
	}
}

// shipPrerequisites checks what harmony ship against fleet dev needs (kube
// binaries, the nats CLI, the test registry, buildah, go, the Podman API
// service), removes at cleanup the podman-1 containers created while the
// test ran, and waits until no other device's example containers are left
// on the shared engine (the end-to-end test of internal/e2e runs the same
// container names).
func shipPrerequisites(t *testing.T) (reg podmantest.Registry, goBin, sock string, conn context.Context) {
	t.Helper()
	needKube(t)
	natsCLI(t)
	reg = podmantest.TestRegistry(t)
	if _, err := exec.LookPath("buildah"); err != nil {
		testenv.Missing(t, "buildah", dev.SetupPodmanCommand, err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go on PATH to build the reference program: %v", err)
	}
	sock = filepath.Join(repoRoot(t), ".cache", "run", "podman.sock")
	conn, err = bindings.NewConnection(t.Context(), "unix://"+sock)
	if err != nil {
		testenv.Missing(t, "the Podman API service", dev.SetupPodmanCommand, err)
	}
	began := time.Now()
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(conn), time.Minute)
		defer cancel()
		list, err := containers.List(cctx, new(containers.ListOptions).WithAll(true).
			WithFilters(map[string][]string{"label": {"fleet.nationtech.io/device=" + dev.PodmanDevice}}))
		if err != nil {
			t.Errorf("list podman-1's containers: %v", err)
		}
		for _, c := range list {
			if !c.Created.Before(began.Add(-time.Second)) {
				if _, err := containers.Remove(cctx, c.ID, new(containers.RemoveOptions).WithForce(true).WithTimeout(0).WithIgnore(true)); err != nil {
					t.Errorf("remove %s: %v", c.Names, err)
				}
			}
		}
	})
	var foreign []string
	if err := testenv.Poll(t.Context(), 5*time.Minute, func() bool {
		foreign = foreignExampleContainers(t, conn)
		return len(foreign) == 0
	}); err != nil {
		t.Fatalf("the Podman engine still runs the example's containers of other devices after 5 minutes (%s): remove them", strings.Join(foreign, ", "))
	}
	return reg, goBin, sock, conn
}

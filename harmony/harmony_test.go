package harmony_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/dev/baostandin"
	"github.com/nationtech/harmony-fleet/harmony"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../k8s/config/crd"}})
}

var deployments = schema.GroupVersionResource{Group: "fleet.nationtech.io", Version: "v1alpha1", Resource: "deployments"}

// world is everything a CI job talks to: the identity provider with the
// tenant's CI machine user, OpenBao holding the registry robot and the
// cluster access, the registry and the API server.
type world struct {
	t       *testing.T
	ctx     context.Context
	prov    *devop.Provider
	bao     *baostandin.Server
	admin   *openbao.Client
	reg     podmantest.Registry
	kube    dynamic.Interface
	kubecfg string
	ciUser  string
	keyJSON string
	keyPEM  string
	ns      string
	workDir string
	secrets []string // values that must never leave memory
}

const ciRole = "shop-ci"

func newWorld(t *testing.T) *world {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	srv := kubeapi.Shared(t)
	w := &world{t: t, ctx: ctx, ns: fmt.Sprintf("shop-%d", time.Now().UnixNano()%1_000_000_000)}

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if w.prov, err = devop.New(devop.Options{SigningKey: key}); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := w.prov.Run(ctx); err != nil {
			t.Error(err)
		}
	})
	if w.ciUser, err = w.prov.CreateMachineUser(ctx, "shop-ci"); err != nil {
		t.Fatal(err)
	}
	kf, err := w.prov.AddMachineKey(ctx, w.ciUser, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := kf.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	w.keyJSON, w.keyPEM = string(b), kf.Key

	w.bao = baostandin.Start(t)
	if w.admin, err = openbao.NewWithToken(openbao.Config{Address: w.bao.URL()}, w.bao.RootToken()); err != nil {
		t.Fatal(err)
	}
	must(t, w.admin.ConfigureJWT(ctx, w.prov.Issuer(), ""))
	must(t, w.admin.PutPolicy(ctx, ciRole, fmt.Sprintf(`path "secret/data/harmony/%s/prod/*" { capabilities = ["read"] }`, w.ns)))
	must(t, w.admin.PutJWTRole(ctx, ciRole, openbao.JWTRole{BoundAudiences: []string{w.prov.Audience()}, BoundSubject: w.ciUser, Policies: []string{ciRole}}))

	w.reg = podmantest.TestRegistry(t)
	kc, err := os.ReadFile(srv.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	w.kubecfg = string(kc)
	must(t, w.admin.Write(ctx, "harmony/"+w.ns+"/prod/RegistryCredentials", map[string]any{
		"registry": w.reg.Addr, "username": w.reg.Username, "password": w.reg.Password}))
	must(t, w.admin.Write(ctx, "harmony/"+w.ns+"/prod/kubeconfig", map[string]any{"kubeconfig": w.kubecfg}))
	// The registry password raw and as an auth.json holds it.
	w.secrets = []string{w.reg.Password, base64.StdEncoding.EncodeToString([]byte(w.reg.Username + ":" + w.reg.Password)), w.keyPEM, w.bao.RootToken()}
	if m := regexp.MustCompile(`client-key-data: (\S+)`).FindStringSubmatch(w.kubecfg); m != nil {
		w.secrets = append(w.secrets, m[1])
	}

	if w.kube, err = dynamic.NewForConfig(srv.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": w.ns}}}
	if _, err := w.kube.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The application repository: two build contexts.
	w.workDir = t.TempDir()
	for name, content := range map[string]string{
		"web/Dockerfile": "FROM " + podmantest.BaseImage + "\nCOPY index.html /www/index.html\nCMD [\"httpd\", \"-f\", \"-h\", \"/www\"]\n",
		"web/index.html": "shop\n",
		"api/Dockerfile": "FROM " + podmantest.BaseImage + "\nCMD [\"sleep\", \"3600\"]\n",
	} {
		p := filepath.Join(w.workDir, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(content), 0o644))
	}
	t.Chdir(w.workDir)
	return w
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// shop is the application under test.
type shop struct{ w *world }

func (shop) Images() []harmony.Image {
	return []harmony.Image{{Name: "web", Context: "web"}, {Name: "api", Context: "api"}}
}

func (s shop) Contexts() []harmony.Context {
	return []harmony.Context{{
		Name: "prod", Namespace: s.w.ns, Registry: s.w.reg.Addr, Repository: "harmony-test/shop",
		OpenBao: harmony.OpenBao{URL: s.w.bao.URL(), Role: ciRole},
		Zitadel: harmony.Zitadel{URL: s.w.prov.Issuer(), ProjectID: s.w.prov.Audience()},
	}}
}

func (shop) Deployment() harmony.Deployment {
	return harmony.Deployment{
		Name: "shop", Placement: map[string]string{"role": "till"},
		Services: []harmony.Service{
			{Name: "shop-web", Image: "web", Ports: []string{"18480:80"}, ImagePullSecret: "shop-pull"},
			{Name: "shop-api", Image: "api", SecretEnv: []harmony.SecretEnv{{Name: "DB_PASSWORD", Secret: "shop/db", Key: "password"}}},
		},
	}
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs harmony in the application's folder with HOME and TMPDIR of its
// own and only the environment variables given.
func (w *world) run(env map[string]string, args ...string) result {
	w.t.Helper()
	var stdout, stderr bytes.Buffer
	code := harmony.Run(w.ctx, shop{w}, harmony.Options{Args: args, Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return env[k] }})
	return result{code, stdout.String(), stderr.String()}
}

func (w *world) ciEnv() map[string]string { return map[string]string{harmony.KeyVariable: w.keyJSON} }

// noSecretIn fails when a secret value appears in s.
func (w *world) noSecretIn(what, s string) {
	w.t.Helper()
	for _, v := range w.secrets {
		if v != "" && strings.Contains(s, v) {
			w.t.Errorf("%s contains a secret value", what)
		}
	}
}

// noSecretUnder fails when a file under dir contains a secret value.
func (w *world) noSecretUnder(dir string) {
	w.t.Helper()
	for _, path := range filesWithSecrets(w.t, dir, w.secrets) {
		w.t.Errorf("%s contains a secret value", path)
	}
}

// filesWithSecrets lists the regular files under dir that contain one of
// secrets.
func filesWithSecrets(t *testing.T, dir string, secrets []string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		for _, v := range secrets {
			if v != "" && bytes.Contains(b, []byte(v)) {
				found = append(found, path)
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

func (w *world) deployment() *unstructured.Unstructured {
	w.t.Helper()
	u, err := w.kube.Resource(deployments).Namespace(w.ns).Get(w.ctx, "shop", metav1.GetOptions{})
	if err != nil {
		w.t.Fatal(err)
	}
	return u
}

func images(u *unstructured.Unstructured) []string {
	svcs, _, _ := unstructured.NestedSlice(u.Object, "spec", "score", "data", "services")
	var out []string
	for _, s := range svcs {
		out = append(out, s.(map[string]any)["image"].(string))
	}
	return out
}

var digestLine = regexp.MustCompile(`(?m)^image (\w+) (\S+@sha256:[a-f0-9]{64})$`)

func TestShipPushesEveryImageAndAppliesTheirDigestsWithoutLeavingACredential(t *testing.T) {
	podmantest.Connect(t) // before newWorld changes the working directory
	w := newWorld(t)
	home, tmp := t.TempDir(), t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("TMPDIR", tmp)
	tag := fmt.Sprintf("c%d", time.Now().UnixNano())

	start := time.Now()
	r := w.run(w.ciEnv(), "ship", "--context", "prod", "--tag", tag, "--verbose")
	t.Logf("ship took %s", time.Since(start).Round(time.Millisecond))
	if r.code != harmony.ExitOK {
		t.Fatalf("ship exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "tag "+tag+"\n") {
		t.Errorf("stdout does not print the tag:\n%s", r.stdout)
	}
	printed := map[string]string{}
	for _, m := range digestLine.FindAllStringSubmatch(r.stdout, -1) {
		printed[m[1]] = m[2]
	}
	repo := w.reg.Addr + "/harmony-test/shop/"
	if len(printed) != 2 || !strings.HasPrefix(printed["web"], repo+"web@") || !strings.HasPrefix(printed["api"], repo+"api@") {
		t.Fatalf("printed digests %v, want web and api under %s\n%s", printed, repo, r.stdout)
	}
	d := w.deployment()
	if got, want := images(d), []string{printed["web"], printed["api"]}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the Deployment runs %v, ship printed %v", got, want)
	}
	if d.GetAnnotations()[harmony.AnnotationTag] != tag {
		t.Errorf("tag annotation %q, want %q", d.GetAnnotations()[harmony.AnnotationTag], tag)
	}
	gen := d.GetGeneration()

	t.Run("re-running the unchanged commit makes no new generation", func(t *testing.T) {
		r := w.run(w.ciEnv(), "ship", "--context", "prod", "--tag", tag)
		if r.code != harmony.ExitOK {
			t.Fatalf("ship exited %d: %s", r.code, r.stderr)
		}
		if again := w.deployment().GetGeneration(); again != gen {
			t.Errorf("generation %d after re-running, was %d", again, gen)
		}
		if !strings.Contains(r.stdout, fmt.Sprintf("generation %d\n", gen)) {
			t.Errorf("stdout:\n%s", r.stdout)
		}
	})
	t.Run("a changed image makes the next generation", func(t *testing.T) {
		must(t, os.WriteFile(filepath.Join(w.workDir, "web", "index.html"), []byte("shop v2\n"), 0o644))
		r := w.run(w.ciEnv(), "ship", "--context", "prod", "--tag", tag+"b")
		if r.code != harmony.ExitOK {
			t.Fatalf("ship exited %d: %s", r.code, r.stderr)
		}
		if next := w.deployment().GetGeneration(); next != gen+1 {
			t.Errorf("generation %d, want %d", next, gen+1)
		}
	})
	t.Run("no credential is printed or left on disk", func(t *testing.T) {
		w.noSecretIn("stdout", r.stdout)
		w.noSecretIn("stderr", r.stderr)
		w.noSecretUnder(home)
		w.noSecretUnder(tmp)
		w.noSecretUnder(w.workDir)
		left, _ := filepath.Glob(filepath.Join(tmp, "harmony-*"))
		if len(left) > 0 {
			t.Errorf("temporary registry configuration left behind: %v", left)
		}
		if _, err := os.Stat(filepath.Join(home, ".config", "containers", "auth.json")); err == nil {
			t.Error("ship wrote the user's container auth file")
		}
	})
}

// The scans above would see a credential: a planted one is found, raw or
// the way an auth.json holds it.
func TestTheCredentialScanFindsAPlantedSecret(t *testing.T) {
	dir := t.TempDir()
	planted := filepath.Join(dir, "a", "b", "auth.json")
	must(t, os.MkdirAll(filepath.Dir(planted), 0o755))
	must(t, os.WriteFile(planted, []byte(`{"auths":{"x":{"password":"planted-4711"}}}`), 0o600))
	if got := filesWithSecrets(t, dir, []string{"planted-4711"}); len(got) != 1 || got[0] != planted {
		t.Fatalf("found %v, want %s", got, planted)
	}
	encoded := filepath.Join(dir, "c", "auth.json")
	must(t, os.MkdirAll(filepath.Dir(encoded), 0o755))
	auth := base64.StdEncoding.EncodeToString([]byte("robot:planted-4712"))
	must(t, os.WriteFile(encoded, []byte(`{"auths":{"x":{"auth":"`+auth+`"}}}`), 0o600))
	if got := filesWithSecrets(t, filepath.Dir(encoded), []string{"planted-4712", auth}); len(got) != 1 || got[0] != encoded {
		t.Fatalf("found %v, want %s", got, encoded)
	}
}

// hostileEnvironment sets every variable a CI job might carry credentials
// in (and HOME's usual files) to values that would fail harmony if it took
// them: a kubeconfig for a server that is not there, registry
// configurations with a wrong password for the test registry, OpenBao
// tokens and addresses that are not the context's.
func (w *world) hostileEnvironment(t *testing.T, baoToken string) {
	t.Helper()
	dir := t.TempDir()
	wrongKube := "apiVersion: v1\nkind: Config\nclusters:\n- name: wrong\n  cluster:\n    server: https://127.0.0.1:1\n" +
		"users:\n- name: wrong\n  user:\n    token: wrong-token\ncontexts:\n- name: wrong\n  context:\n    cluster: wrong\n    user: wrong\ncurrent-context: wrong\n"
	wrongAuth := `{"auths":{"` + w.reg.Addr + `":{"auth":"` + base64.StdEncoding.EncodeToString([]byte(w.reg.Username+":wrong-password")) + `"}}}`
	home := filepath.Join(dir, "home")
	for path, content := range map[string]string{
		"kubeconfig":                        wrongKube,
		"docker/config.json":                wrongAuth,
		"auth.json":                         wrongAuth,
		"home/.kube/config":                 wrongKube,
		"home/.docker/config.json":          wrongAuth,
		"home/.config/containers/auth.json": wrongAuth,
		"home/.vault-token":                 baoToken,
	} {
		p := filepath.Join(dir, path)
		must(t, os.MkdirAll(filepath.Dir(p), 0o700))
		must(t, os.WriteFile(p, []byte(content), 0o600))
	}
	for k, v := range map[string]string{
		"HOME": home, "TMPDIR": t.TempDir(),
		"KUBECONFIG": filepath.Join(dir, "kubeconfig"), "DOCKER_CONFIG": filepath.Join(dir, "docker"),
		"REGISTRY_AUTH_FILE": filepath.Join(dir, "auth.json"),
		"VAULT_TOKEN":        baoToken, "BAO_TOKEN": baoToken,
		"VAULT_ADDR": "http://127.0.0.1:1", "BAO_ADDR": "http://127.0.0.1:1",
		"VAULT_NAMESPACE": "wrong", "BAO_NAMESPACE": "wrong",
	} {
		t.Setenv(k, v)
	}
}

// runEnv runs harmony with the process environment (os.Getenv), as Main
// does.
func (w *world) runEnv(args ...string) result {
	w.t.Helper()
	var stdout, stderr bytes.Buffer
	code := harmony.Run(w.ctx, shop{w}, harmony.Options{Args: args, Stdout: &stdout, Stderr: &stderr, Getenv: os.Getenv})
	return result{code, stdout.String(), stderr.String()}
}

func TestCredentialsInTheUsualVariablesAreNotTaken(t *testing.T) {
	podmantest.Connect(t) // before newWorld changes the working directory
	w := newWorld(t)

	t.Run("without the key a valid OpenBao token in VAULT_TOKEN does not replace it", func(t *testing.T) {
		w.hostileEnvironment(t, w.bao.RootToken())
		t.Setenv(harmony.KeyVariable, "")
		r := w.runEnv("ship", "--context", "prod", "--tag", "nokey")
		if r.code != harmony.ExitFailed || !strings.Contains(r.stderr, harmony.KeyVariable) || !strings.Contains(r.stderr, "not set") {
			t.Fatalf("exit %d, stderr %q; want a failure naming %s", r.code, r.stderr, harmony.KeyVariable)
		}
		w.noSecretIn("stderr", r.stderr)
	})
	t.Run("with the key ship uses only what OpenBao holds", func(t *testing.T) {
		w.hostileEnvironment(t, "hvs.bogus-token")
		t.Setenv(harmony.KeyVariable, w.keyJSON)
		tag := fmt.Sprintf("h%d", time.Now().UnixNano())
		r := w.runEnv("ship", "--context", "prod", "--tag", tag)
		if r.code != harmony.ExitOK {
			t.Fatalf("ship exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		printed := map[string]string{}
		for _, m := range digestLine.FindAllStringSubmatch(r.stdout, -1) {
			printed[m[1]] = m[2]
		}
		d := w.deployment()
		if got, want := images(d), []string{printed["web"], printed["api"]}; want[0] == "" || want[1] == "" || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("the Deployment runs %v, ship printed %v", got, want)
		}
		if d.GetAnnotations()[harmony.AnnotationTag] != tag {
			t.Errorf("tag annotation %q, want %q: the apply did not reach the test API server", d.GetAnnotations()[harmony.AnnotationTag], tag)
		}
		w.noSecretIn("stdout", r.stdout)
		w.noSecretIn("stderr", r.stderr)
		w.noSecretUnder(os.Getenv("HOME"))
		w.noSecretUnder(os.Getenv("TMPDIR"))
	})
}

func TestDeployAppliesExistingDigestsAndRefusesMutableTags(t *testing.T) {
	w := newWorld(t)
	web := w.reg.Addr + "/harmony-test/shop/web@sha256:" + strings.Repeat("a", 64)
	api := w.reg.Addr + "/harmony-test/shop/api:dev-feature-1"

	r := w.run(w.ciEnv(), "deploy", "--context", "prod", "--tag", "abc", "--image", "web="+web, "--image", "api="+api)
	if r.code != harmony.ExitOK {
		t.Fatalf("deploy exited %d: %s", r.code, r.stderr)
	}
	if got := images(w.deployment()); got[0] != web || got[1] != api {
		t.Errorf("the Deployment runs %v", got)
	}
	w.noSecretIn("stdout", r.stdout)
	w.noSecretIn("stderr", r.stderr)

	tests := []struct {
		name  string
		args  []string
		names string
	}{
		{"latest is refused naming the flag and the fix", []string{"--image", "web=" + w.reg.Addr + "/shop/web:latest", "--image", "api=" + api}, "--image web="},
		{"a release tag is refused", []string{"--image", "web=" + web, "--image", "api=" + w.reg.Addr + "/shop/api:v2"}, "registry digest (repo@sha256:<64 hex>) or an explicit dev-* tag"},
		{"a missing image is named", []string{"--image", "web=" + web}, "--image api=<ref> is missing"},
		{"an unknown image is named", []string{"--image", "web=" + web, "--image", "api=" + api, "--image", "db=" + web}, `no image "db"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := w.run(w.ciEnv(), append([]string{"deploy", "--context", "prod", "--tag", "abc2"}, tc.args...)...)
			if r.code != harmony.ExitUsage || !strings.Contains(r.stderr, tc.names) {
				t.Fatalf("exit %d, stderr %q; want %d saying %q", r.code, r.stderr, harmony.ExitUsage, tc.names)
			}
			if a := w.deployment().GetAnnotations()[harmony.AnnotationTag]; a != "abc" {
				t.Errorf("a refused deploy changed the Deployment (tag %q)", a)
			}
		})
	}
}

func TestTheOneSecretIsCheckedAndNothingElseIsTaken(t *testing.T) {
	w := newWorld(t)
	web := w.reg.Addr + "/harmony-test/shop/web@sha256:" + strings.Repeat("b", 64)
	deploy := []string{"deploy", "--context", "prod", "--tag", "abc", "--image", "web=" + web, "--image", "api=" + web}
	otherUser, err := w.prov.CreateMachineUser(w.ctx, "not-ci")
	must(t, err)
	otherKey, err := w.prov.AddMachineKey(w.ctx, otherUser, time.Time{})
	must(t, err)
	otherJSON, err := otherKey.Marshal()
	must(t, err)
	w.secrets = append(w.secrets, otherKey.Key)

	tests := []struct {
		name  string
		env   map[string]string
		names []string
	}{
		{"an unset variable is named", map[string]string{}, []string{harmony.KeyVariable, "not set"}},
		{"a variable that is not JSON is named", map[string]string{harmony.KeyVariable: "{oops"}, []string{harmony.KeyVariable, "JSON"}},
		{"a key without its private key names the field", map[string]string{harmony.KeyVariable: `{"type":"serviceaccount","keyId":"k","userId":"u"}`},
			[]string{harmony.KeyVariable, `"key"`}},
		{"a key the role is not bound to is refused by OpenBao", map[string]string{harmony.KeyVariable: string(otherJSON)}, []string{"login", "OpenBao"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := w.run(tc.env, deploy...)
			if r.code == harmony.ExitOK {
				t.Fatal("deploy succeeded")
			}
			for _, s := range tc.names {
				if !strings.Contains(r.stderr, s) {
					t.Errorf("stderr %q does not say %q", r.stderr, s)
				}
			}
			w.noSecretIn("stderr", r.stderr)
			w.noSecretIn("stdout", r.stdout)
		})
	}

	t.Run("a push robot for another registry is not used", func(t *testing.T) {
		must(t, w.admin.Write(w.ctx, "harmony/"+w.ns+"/prod/RegistryCredentials", map[string]any{
			"registry": "elsewhere.example:5000", "username": w.reg.Username, "password": w.reg.Password}))
		r := w.run(w.ciEnv(), "ship", "--context", "prod", "--tag", "abc")
		if r.code != harmony.ExitFailed || !strings.Contains(r.stderr, `field "registry" is "elsewhere.example:5000"`) || strings.Contains(r.stdout, "image ") {
			t.Fatalf("exit %d, stdout %q, stderr %q; want a refusal naming the registry field before any build", r.code, r.stdout, r.stderr)
		}
		w.noSecretIn("stderr", r.stderr)
	})
	t.Run("a policy without the cluster access names the path", func(t *testing.T) {
		must(t, w.admin.PutPolicy(w.ctx, ciRole, fmt.Sprintf(`path "secret/data/harmony/%s/prod/RegistryCredentials" { capabilities = ["read"] }`, w.ns)))
		r := w.run(w.ciEnv(), deploy...)
		if r.code != harmony.ExitFailed || !strings.Contains(r.stderr, "harmony/"+w.ns+"/prod/kubeconfig") || !strings.Contains(r.stderr, "permission denied") {
			t.Fatalf("exit %d, stderr %q; want a permission error naming the kubeconfig path", r.code, r.stderr)
		}
	})
}

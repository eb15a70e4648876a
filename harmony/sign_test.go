package harmony_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/nationtech/harmony-fleet/harmony"
	"github.com/nationtech/harmony-fleet/imagesig"
	"github.com/nationtech/harmony-fleet/imagesig/sigkeys"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// signedShop is shop with a context that signs.
type signedShop struct {
	shop
	trusted []harmony.TrustedKey
}

func (s signedShop) Contexts() []harmony.Context {
	cs := s.shop.Contexts()
	cs[0].Signing = &harmony.Signing{TrustedKeys: s.trusted}
	return cs
}

// testKey is a signing key pair.
type testKey struct {
	private, public, passphrase string
}

func newTestKey(t *testing.T) testKey {
	t.Helper()
	pass := fmt.Sprintf("passphrase-%d", time.Now().UnixNano())
	priv, pub, err := imagesig.GenerateSigningKey([]byte(pass))
	if err != nil {
		t.Fatal(err)
	}
	return testKey{private: string(priv), public: string(pub), passphrase: pass}
}

// storeKey puts k at the context's default signing key path.
func (w *world) storeKey(k testKey) {
	w.t.Helper()
	must(w.t, w.admin.Write(w.ctx, "harmony/"+w.ns+"/prod/signing-key", map[string]any{"privateKey": k.private, "passphrase": k.passphrase}))
	w.secrets = append(w.secrets, k.private, k.passphrase)
}

func (w *world) runApp(app harmony.HarmonyApp, args ...string) result {
	w.t.Helper()
	var stdout, stderr strings.Builder
	code := harmony.Run(w.ctx, app, harmony.Options{Args: args, Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string { return w.ciEnv()[k] }})
	return result{code, stdout.String(), stderr.String()}
}

func TestShipSignsEveryPushedDigestAndTheDeploymentTrustsTheContextsKeys(t *testing.T) {
	podmantest.Connect(t) // before newWorld changes the working directory
	w := newWorld(t)
	v, err := imagesig.NewVerifier() // before TMPDIR moves: its folder is not ship's
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	tmp := t.TempDir()
	t.Setenv("HOME", t.TempDir())
	t.Setenv("TMPDIR", tmp)
	old, current := newTestKey(t), newTestKey(t)
	w.storeKey(current)
	trusted := []harmony.TrustedKey{{Name: "ci-old", PublicKey: old.public}, {Name: "ci-2026", PublicKey: current.public}}
	app := signedShop{shop: shop{w}, trusted: trusted}
	tag := fmt.Sprintf("s%d", time.Now().UnixNano())

	r := w.runApp(app, "ship", "--context", "prod", "--tag", tag)
	if r.code != harmony.ExitOK {
		t.Fatalf("ship exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	printed := map[string]string{}
	for _, m := range digestLine.FindAllStringSubmatch(r.stdout, -1) {
		printed[m[1]] = m[2]
	}
	if len(printed) != 2 {
		t.Fatalf("printed digests %v\n%s", printed, r.stdout)
	}
	auth := &imagesig.Auth{Username: w.reg.Username, Password: w.reg.Password}
	verify := func(ref string, keys ...testKey) error {
		var ks []sigkeys.Key
		for i, k := range keys {
			ks = append(ks, sigkeys.Key{Name: fmt.Sprintf("k%d", i), PublicKey: k.public})
		}
		repo, digest, _ := strings.Cut(ref, "@")
		return v.Verify(w.ctx, imagesig.Request{Image: repo, Digest: digest, Keys: ks, Auth: auth})
	}
	t.Run("every pushed digest is signed by the context's key", func(t *testing.T) {
		for name, ref := range printed {
			if err := verify(ref, current); err != nil {
				t.Errorf("%s: %v", name, err)
			}
			if err := verify(ref, old); !errors.Is(err, imagesig.ErrUntrusted) {
				t.Errorf("%s verifies under a key that did not sign it: %v", name, err)
			}
		}
	})
	t.Run("the Deployment trusts the context's keys", func(t *testing.T) {
		keys, _, _ := unstructured.NestedSlice(w.deployment().Object, "spec", "signatures", "keys")
		want := []any{map[string]any{"name": "ci-old", "publicKey": old.public}, map[string]any{"name": "ci-2026", "publicKey": current.public}}
		if diff := cmp.Diff(want, keys); diff != "" {
			t.Errorf("spec.signatures.keys (-want +got):\n%s", diff)
		}
	})
	t.Run("re-running the unchanged commit adds no signature", func(t *testing.T) {
		before := map[string]string{}
		for name, ref := range printed {
			repo, digest, _ := strings.Cut(strings.TrimPrefix(ref, w.reg.Addr+"/"), "@")
			before[name] = string(podmantest.GetManifest(t, w.reg, repo, podmantest.SignatureTag(digest)).Body)
		}
		if r := w.runApp(app, "ship", "--context", "prod", "--tag", tag); r.code != harmony.ExitOK {
			t.Fatalf("ship exited %d: %s", r.code, r.stderr)
		}
		for name, ref := range printed {
			repo, digest, _ := strings.Cut(strings.TrimPrefix(ref, w.reg.Addr+"/"), "@")
			if after := string(podmantest.GetManifest(t, w.reg, repo, podmantest.SignatureTag(digest)).Body); after != before[name] {
				t.Errorf("%s: the signature attachment changed on a re-run", name)
			}
		}
	})
	t.Run("neither the key nor its passphrase is printed or left on disk", func(t *testing.T) {
		w.noSecretIn("stdout", r.stdout)
		w.noSecretIn("stderr", r.stderr)
		w.noSecretUnder(tmp)
		w.noSecretUnder(w.workDir)
		if left, _ := filepath.Glob(filepath.Join(tmp, "fleet-imagesig-*")); len(left) > 0 {
			t.Errorf("temporary signing folders left behind: %v", left)
		}
	})
}

func TestShipRefusesASigningKeyTheContextDoesNotTrustBeforeBuilding(t *testing.T) {
	podmantest.Connect(t)
	w := newWorld(t)
	t.Setenv("TMPDIR", t.TempDir())
	stored, other := newTestKey(t), newTestKey(t)
	w.storeKey(stored)
	app := signedShop{shop: shop{w}, trusted: []harmony.TrustedKey{{Name: "ci-2026", PublicKey: other.public}}}
	r := w.runApp(app, "ship", "--context", "prod", "--tag", fmt.Sprintf("x%d", time.Now().UnixNano()))
	storedID, _ := sigkeys.KeyID(stored.public)
	otherID, _ := sigkeys.KeyID(other.public)
	want := fmt.Sprintf("harmony: signing key: OpenBao harmony/%s/prod/signing-key holds the key %s, which is not among context \"prod\"'s "+
		"Signing.TrustedKeys (ci-2026 (%s)): add its public key there (devices would refuse every image it signs), or store the right key",
		w.ns, storedID, otherID)
	if r.code == harmony.ExitOK || !strings.Contains(r.stderr, want) {
		t.Fatalf("ship exited %d\nstderr:\n%s\nwant it to say:\n%s", r.code, r.stderr, want)
	}
	if strings.Contains(r.stdout, "image ") {
		t.Errorf("ship built or pushed before refusing:\n%s", r.stdout)
	}
	if _, err := w.kube.Resource(deployments).Namespace(w.ns).Get(w.ctx, "shop", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Deployment was applied: %v", err)
	}
	w.noSecretIn("stderr", r.stderr)
}

func TestAContextThatSignsWithoutTrustedKeysTrustsItsSigningKeyOnly(t *testing.T) {
	podmantest.Connect(t)
	w := newWorld(t)
	t.Setenv("TMPDIR", t.TempDir())
	k := newTestKey(t)
	w.storeKey(k)
	app := signedShop{shop: shop{w}}
	r := w.runApp(app, "ship", "--context", "prod", "--tag", fmt.Sprintf("d%d", time.Now().UnixNano()))
	if r.code != harmony.ExitOK {
		t.Fatalf("ship exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	keys, _, _ := unstructured.NestedSlice(w.deployment().Object, "spec", "signatures", "keys")
	want := []any{map[string]any{"name": "prod-signing", "publicKey": k.public}}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("spec.signatures.keys (-want +got):\n%s", diff)
	}
	w.noSecretIn("stdout", r.stdout)
	w.noSecretIn("stderr", r.stderr)
}

// transitShop is shop with a context that signs through OpenBao transit.
type transitShop struct {
	shop
	key string
}

func (s transitShop) Contexts() []harmony.Context {
	cs := s.shop.Contexts()
	cs[0].Signing = &harmony.Signing{TransitKey: s.key}
	return cs
}

// useTransit enables transit with the key name and gives the CI role the
// documented policy (docs/ci.md): its KV paths, sign with the key, read
// its public keys; no KV signing key exists.
func (w *world) useTransit(name string) {
	w.t.Helper()
	must(w.t, w.admin.EnableTransit(w.ctx, "transit"))
	must(w.t, w.admin.TransitCreateKey(w.ctx, "transit", name))
	must(w.t, w.admin.PutPolicy(w.ctx, ciRole, fmt.Sprintf(`path "secret/data/harmony/%s/prod/*" { capabilities = ["read"] }
path "transit/sign/%s" { capabilities = ["update"] }
path "transit/keys/%s" { capabilities = ["read"] }
`, w.ns, name, name)))
}

func TestShipSignsThroughTransitAndTheDeploymentTrustsEveryVersionAfterARotation(t *testing.T) {
	podmantest.Connect(t)
	w := newWorld(t)
	v, err := imagesig.NewVerifier()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	w.useTransit("shop-signing")
	app := transitShop{shop: shop{w}, key: "shop-signing"}
	auth := &imagesig.Auth{Username: w.reg.Username, Password: w.reg.Password}
	pubs := func() map[int]string {
		p, err := w.admin.TransitPublicKeys(w.ctx, "transit", "shop-signing")
		must(t, err)
		return p
	}
	ship := func(tag string) map[string]string {
		t.Helper()
		r := w.runApp(app, "ship", "--context", "prod", "--tag", tag)
		if r.code != harmony.ExitOK {
			t.Fatalf("ship exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		w.noSecretIn("stdout", r.stdout)
		w.noSecretIn("stderr", r.stderr)
		printed := map[string]string{}
		for _, m := range digestLine.FindAllStringSubmatch(r.stdout, -1) {
			printed[m[1]] = m[2]
		}
		if len(printed) != 2 {
			t.Fatalf("printed digests %v\n%s", printed, r.stdout)
		}
		return printed
	}
	verify := func(ref, pub string) error {
		repo, digest, _ := strings.Cut(ref, "@")
		return v.Verify(w.ctx, imagesig.Request{Image: repo, Digest: digest, Keys: []sigkeys.Key{{Name: "k", PublicKey: pub}}, Auth: auth})
	}
	keys := func() []any {
		k, _, _ := unstructured.NestedSlice(w.deployment().Object, "spec", "signatures", "keys")
		return k
	}

	first := ship(fmt.Sprintf("t%d", time.Now().UnixNano()))
	v1 := pubs()[1]
	for name, ref := range first {
		if err := verify(ref, v1); err != nil {
			t.Errorf("%s is not signed by transit version 1: %v", name, err)
		}
	}
	if diff := cmp.Diff([]any{map[string]any{"name": "prod-signing-v1", "publicKey": v1}}, keys()); diff != "" {
		t.Errorf("spec.signatures.keys before the rotation (-want +got):\n%s", diff)
	}

	must(t, w.admin.TransitRotate(w.ctx, "transit", "shop-signing"))
	v2 := pubs()[2]
	second := ship(fmt.Sprintf("r%d", time.Now().UnixNano()))
	for name, ref := range second {
		if err := verify(ref, v2); err != nil {
			t.Errorf("after the rotation %s is not signed by transit version 2: %v", name, err)
		}
	}
	want := []any{map[string]any{"name": "prod-signing-v1", "publicKey": v1}, map[string]any{"name": "prod-signing-v2", "publicKey": v2}}
	if diff := cmp.Diff(want, keys()); diff != "" {
		t.Errorf("spec.signatures.keys after the rotation (-want +got):\n%s", diff)
	}
	w.noSecretUnder(tmp)
}

func TestATransitKeyNameThatIsAPathIsRefusedNamingTheField(t *testing.T) {
	podmantest.Connect(t)
	w := newWorld(t)
	r := w.runApp(transitShop{shop: shop{w}, key: "transit/keys/x"}, "ship", "--context", "prod", "--tag", "v1")
	want := `Signing.TransitKey "transit/keys/x" is not an OpenBao transit key name`
	if r.code != harmony.ExitUsage || !strings.Contains(r.stderr, want) {
		t.Fatalf("ship exited %d\nstderr:\n%s\nwant exit %d saying %s", r.code, r.stderr, harmony.ExitUsage, want)
	}
}

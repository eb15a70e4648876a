package imagesig_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/signature"
	"go.podman.io/image/v5/types"

	"github.com/nationtech/harmony-fleet/dev/baostandin"
	"github.com/nationtech/harmony-fleet/imagesig"
	"github.com/nationtech/harmony-fleet/imagesig/sigkeys"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// transitSigner signs through OpenBao transit (the stand-in, real client).
type transitSigner struct {
	c     *openbao.Client
	key   string
	calls int
}

func (s *transitSigner) SignPayload(ctx context.Context, payload []byte) ([]byte, error) {
	s.calls++
	sig, _, err := s.c.TransitSign(ctx, "transit", s.key, payload)
	return sig, err
}

// transitKey makes a transit key and a CI token that may only sign with
// it and read its public keys; it returns the signer and the latest
// public key.
func transitKey(t *testing.T) (*transitSigner, *openbao.Client, string) {
	t.Helper()
	ctx := t.Context()
	bao := baostandin.Start(t)
	admin, err := openbao.NewWithToken(openbao.Config{Address: bao.URL()}, bao.RootToken())
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []error{
		admin.EnableTransit(ctx, "transit"),
		admin.TransitCreateKey(ctx, "transit", "ci"),
		admin.PutPolicy(ctx, "ci", `path "transit/sign/ci" { capabilities = ["update"] }`+"\n"+`path "transit/keys/ci" { capabilities = ["read"] }`),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	tok, err := admin.CreateToken(ctx, []string{"ci"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ci, err := openbao.NewWithToken(openbao.Config{Address: bao.URL()}, tok)
	if err != nil {
		t.Fatal(err)
	}
	pubs, err := ci.TransitPublicKeys(ctx, "transit", "ci")
	if err != nil {
		t.Fatal(err)
	}
	return &transitSigner{c: ci, key: "ci"}, admin, pubs[len(pubs)]
}

// containersImageAccepts evaluates containers/image's own sigstore policy
// (the one Podman's policy.json "sigstoreSigned" is) for ref@digest.
func containersImageAccepts(t *testing.T, reg podmantest.Registry, p pushed, pubPEM string) error {
	t.Helper()
	named, err := reference.ParseNormalizedNamed(p.byDigest)
	if err != nil {
		t.Fatal(err)
	}
	req, err := signature.NewPRSigstoreSigned(signature.PRSigstoreSignedWithKeyData([]byte(pubPEM)),
		signature.PRSigstoreSignedWithSignedIdentity(signature.NewPRMMatchRepoDigestOrExact()))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := signature.NewPolicyContext(&signature.Policy{Default: signature.PolicyRequirements{req}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = pc.Destroy() }()
	ref, err := docker.NewReference(named)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := writeFile(dir+"/sigstore.yaml", "default-docker:\n  use-sigstore-attachments: true\n"); err != nil {
		t.Fatal(err)
	}
	sys := &types.SystemContext{RegistriesDirPath: dir, DockerAuthConfig: &types.DockerAuthConfig{Username: reg.Username, Password: reg.Password}}
	src, err := ref.NewImageSource(t.Context(), sys)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	ok, err := pc.IsRunningImageAllowed(t.Context(), image.UnparsedInstance(src, nil))
	if !ok && err == nil {
		err = errors.New("not allowed")
	}
	return err
}

func TestATransitSignatureVerifiesWithTheAgentsVerifierAndContainersImagePolicy(t *testing.T) {
	reg := podmantest.TestRegistry(t)
	repo := "fleet-imagesig-test/transit"
	ts, admin, pub := transitKey(t)
	auth := &imagesig.Auth{Username: reg.Username, Password: reg.Password}
	p := push(t, reg, reg.Addr+"/"+repo+":t-"+random())

	if err := imagesig.Sign(t.Context(), imagesig.SignOptions{Pushed: p.byDigest, Tag: p.tag, Signer: ts, SignerPublicKey: pub, Auth: auth}); err != nil {
		t.Fatalf("sign through transit: %v", err)
	}
	if ts.calls != 1 {
		t.Fatalf("transit signed %d payloads, want 1", ts.calls)
	}
	v, err := imagesig.NewVerifier()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	key := sigkeys.Key{Name: "transit-v1", PublicKey: pub}
	if err := v.Verify(t.Context(), imagesig.Request{Image: p.tag, Digest: p.digest, Keys: []sigkeys.Key{key}, Auth: auth}); err != nil {
		t.Fatalf("the agent's verifier refuses the transit signature: %v", err)
	}
	if err := containersImageAccepts(t, reg, p, pub); err != nil {
		t.Fatalf("containers/image's sigstoreSigned policy refuses the transit signature: %v", err)
	}

	// After a rotation the new version signs; a signer still told the old
	// version's public key refuses to write what does not verify under it.
	if err := admin.TransitRotate(t.Context(), "transit", "ci"); err != nil {
		t.Fatal(err)
	}
	q := push(t, reg, reg.Addr+"/"+repo+":t-"+random())
	err = imagesig.Sign(t.Context(), imagesig.SignOptions{Pushed: q.byDigest, Tag: q.tag, Signer: ts, SignerPublicKey: pub, Auth: auth})
	if !errors.Is(err, imagesig.ErrSignerMismatch) {
		t.Fatalf("sign with a stale public key: err = %v, want ErrSignerMismatch", err)
	}
	err = v.Verify(t.Context(), imagesig.Request{Image: q.tag, Digest: q.digest, Keys: []sigkeys.Key{key}, Auth: auth})
	if !errors.Is(err, imagesig.ErrNoSignature) {
		t.Fatalf("after a refused signing: Verify = %v, want ErrNoSignature (nothing written)", err)
	}
	pubs, err := ts.c.TransitPublicKeys(t.Context(), "transit", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if err := imagesig.Sign(t.Context(), imagesig.SignOptions{Pushed: q.byDigest, Tag: q.tag, Signer: ts, SignerPublicKey: pubs[2], Auth: auth}); err != nil {
		t.Fatalf("sign with version 2: %v", err)
	}
	both := []sigkeys.Key{key, {Name: "transit-v2", PublicKey: pubs[2]}}
	for _, img := range []pushed{p, q} {
		if err := v.Verify(t.Context(), imagesig.Request{Image: img.tag, Digest: img.digest, Keys: both, Auth: auth}); err != nil {
			t.Errorf("trusting both versions, %s is refused: %v", img.tag, err)
		}
	}
	if strings.Contains(pubs[2], "PRIVATE") {
		t.Error("transit's key read shows private material")
	}
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o600) }

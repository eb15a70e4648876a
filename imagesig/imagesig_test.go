package imagesig_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/nationtech/harmony-fleet/imagesig"
	"github.com/nationtech/harmony-fleet/imagesig/sigkeys"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// signer is a test signing key.
type signer struct {
	name       string
	private    []byte
	public     string
	passphrase []byte
}

func newSigner(t *testing.T, name string) signer {
	t.Helper()
	pass := []byte("pass-" + name + "-" + random())
	priv, pub, err := imagesig.GenerateSigningKey(pass)
	if err != nil {
		t.Fatal(err)
	}
	return signer{name: name, private: priv, public: string(pub), passphrase: pass}
}

func (s signer) key() sigkeys.Key { return sigkeys.Key{Name: s.name, PublicKey: s.public} }

func random() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// pushed is an image pushed to the test registry under tag.
type pushed struct {
	tag, byDigest, digest string
}

func push(t *testing.T, reg podmantest.Registry, tag string) pushed {
	t.Helper()
	ref := podmantest.PushImageAs(t, reg, tag, "FROM "+podmantest.BaseImage+"\nLABEL fleet.test.unique="+random()+"\n")
	_, d, _ := strings.Cut(ref, "@")
	return pushed{tag: tag, byDigest: ref, digest: d}
}

func sign(t *testing.T, reg podmantest.Registry, p pushed, s signer) {
	t.Helper()
	err := imagesig.Sign(t.Context(), imagesig.SignOptions{Pushed: p.byDigest, Tag: p.tag, PrivateKey: s.private,
		Passphrase: s.passphrase, Auth: &imagesig.Auth{Username: reg.Username, Password: reg.Password}})
	if err != nil {
		t.Fatalf("sign %s with %s: %v", p.byDigest, s.name, err)
	}
}

// attachment reads p's signature attachment as the registry serves it.
func attachment(t *testing.T, reg podmantest.Registry, repo string, p pushed) podmantest.Manifest {
	t.Helper()
	return podmantest.GetManifest(t, reg, repo, podmantest.SignatureTag(p.digest))
}

// setAttachment makes the registry serve m as p's signature attachment, as
// a registry an attacker controls can.
func setAttachment(t *testing.T, reg podmantest.Registry, repo string, p pushed, m podmantest.Manifest) {
	t.Helper()
	podmantest.PutManifest(t, reg, repo, podmantest.SignatureTag(p.digest), m)
}

func TestOnlyAnImageATrustedKeySignedForItsDigestIsAccepted(t *testing.T) {
	reg := podmantest.TestRegistry(t)
	repo := "fleet-imagesig-test/app"
	ci, other, next := newSigner(t, "ci"), newSigner(t, "attacker"), newSigner(t, "ci-next")
	tag := func() string { return reg.Addr + "/" + repo + ":t-" + random() }

	signed := push(t, reg, tag())
	sign(t, reg, signed, ci)
	unsigned := push(t, reg, tag())
	byOther := push(t, reg, tag())
	sign(t, reg, byOther, other)
	replaced := push(t, reg, tag())
	sign(t, reg, replaced, other)
	attackers := attachment(t, reg, repo, replaced)
	sign(t, reg, replaced, ci)
	// The attacker puts back the attachment that holds their signature
	// only.
	setAttachment(t, reg, repo, replaced, attackers)
	// The signed tag is moved to another image: its digest has no
	// signature of its own, and then gets the signed image's copied.
	retagged := push(t, reg, signed.tag)
	copied := push(t, reg, tag())
	setAttachment(t, reg, repo, copied, attachment(t, reg, repo, signed))
	byNext := push(t, reg, tag())
	sign(t, reg, byNext, next)

	v, err := imagesig.NewVerifier()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	tests := []struct {
		name   string
		image  pushed
		keys   []sigkeys.Key
		want   error
		reason string
	}{
		{"an image the trusted key signed is accepted", signed, []sigkeys.Key{ci.key()}, nil, ""},
		{"an unsigned image is refused: no signature", unsigned, []sigkeys.Key{ci.key()}, imagesig.ErrNoSignature,
			"the registry holds no signature for this digest"},
		{"an image another key signed is refused", byOther, []sigkeys.Key{ci.key()}, imagesig.ErrUntrusted,
			"its signature was not made by a trusted key"},
		{"an image whose signature was replaced in the registry is refused", replaced, []sigkeys.Key{ci.key()}, imagesig.ErrUntrusted,
			"its signature was not made by a trusted key"},
		{"a re-tagged image, another digest, is refused though the tag was signed", retagged, []sigkeys.Key{ci.key()}, imagesig.ErrNoSignature,
			"the registry holds no signature for this digest"},
		{"a signature copied from another digest is refused", copied, []sigkeys.Key{ci.key()}, imagesig.ErrUntrusted,
			"the signature a trusted key made is for another digest"},
		{"with two trusted keys an image signed by the old key is accepted", signed, []sigkeys.Key{ci.key(), next.key()}, nil, ""},
		{"with two trusted keys an image signed by the new key is accepted", byNext, []sigkeys.Key{ci.key(), next.key()}, nil, ""},
		{"once the old key is dropped its images are refused", signed, []sigkeys.Key{next.key()}, imagesig.ErrUntrusted,
			"its signature was not made by a trusted key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := v.Verify(t.Context(), imagesig.Request{Image: tt.image.tag, Digest: tt.image.digest, Keys: tt.keys,
				Auth: &imagesig.Auth{Username: reg.Username, Password: reg.Password}})
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tt.want)
			}
			if err == nil {
				return
			}
			var ve *imagesig.Error
			if !errors.As(err, &ve) {
				t.Fatalf("%v is not an *imagesig.Error", err)
			}
			var ids []string
			for _, k := range tt.keys {
				ids = append(ids, k.ID())
			}
			want := &imagesig.Error{Image: tt.image.tag, Digest: tt.image.digest, Reason: tt.reason, Keys: ids, Err: tt.want}
			if diff := cmp.Diff(*want, *ve, cmpopts.EquateErrors()); diff != "" {
				t.Errorf("refusal (-want +got):\n%s", diff)
			}
			for _, secret := range []string{reg.Password, string(ci.passphrase), string(ci.private), string(other.private)} {
				if strings.Contains(err.Error(), secret) {
					t.Error("the refusal shows a secret")
				}
			}
		})
	}
}

func TestAnImageWithoutARegistryDigestIsRefused(t *testing.T) {
	v, err := imagesig.NewVerifier()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	k := newSigner(t, "ci").key()
	err = v.Verify(t.Context(), imagesig.Request{Image: "localhost/built:v1", Digest: "", Keys: []sigkeys.Key{k}})
	want := fmt.Sprintf("image localhost/built:v1 (digest ) is not signed by a trusted key: the device's engine has no registry digest "+
		"for it (an image built or loaded on the device cannot be verified); keys tried: %s", k.ID())
	if err == nil || err.Error() != want || !errors.Is(err, imagesig.ErrUntrusted) {
		t.Errorf("Verify = %v\nwant %s", err, want)
	}
}

func TestTheCredentialIsReadOnlyWhenTheRegistryIsRead(t *testing.T) {
	reg := podmantest.TestRegistry(t)
	ci := newSigner(t, "ci")
	p := push(t, reg, reg.Addr+"/fleet-imagesig-test/lazy:t-"+random())
	sign(t, reg, p, ci)
	v, err := imagesig.NewVerifier()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	reads := 0
	credential := func(context.Context) (*imagesig.Auth, error) {
		reads++
		return &imagesig.Auth{Username: reg.Username, Password: reg.Password}, nil
	}
	req := imagesig.Request{Image: p.tag, Digest: p.digest, Keys: []sigkeys.Key{ci.key()}, Credential: credential}
	var got []int
	for range 2 {
		if err := v.Verify(t.Context(), req); err != nil {
			t.Fatal(err)
		}
		got = append(got, reads)
	}
	if diff := cmp.Diff([]int{1, 1}, got); diff != "" {
		t.Errorf("credential reads after each Verify (-want +got):\n%s", diff)
	}
	refused := errors.New("pull secret hub: unavailable")
	req.Image = reg.Addr + "/fleet-imagesig-test/lazy-other:t1"
	req.Credential = func(context.Context) (*imagesig.Auth, error) { return nil, refused }
	if err := v.Verify(t.Context(), req); err != refused {
		t.Errorf("Verify with a failing credential = %v, want its error as it is", err)
	}
}

package agent_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/imagesig"
	"github.com/nationtech/harmony-fleet/imagesig/sigkeys"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
	"github.com/nationtech/harmony-fleet/score"
)

// sigKey is a signing key of the signature tests.
type sigKey struct {
	name            string
	private, public []byte
	passphrase      []byte
}

func newSigKey(t *testing.T, name string) sigKey {
	t.Helper()
	pass := []byte("pass-" + name + "-" + randomHex())
	priv, pub, err := imagesig.GenerateSigningKey(pass)
	if err != nil {
		t.Fatal(err)
	}
	return sigKey{name: name, private: priv, public: pub, passphrase: pass}
}

func (k sigKey) policyKey() events.SignatureKey {
	return events.SignatureKey{Name: k.name, PublicKey: string(k.public)}
}

func (k sigKey) id() string { return sigkeys.Key{Name: k.name, PublicKey: string(k.public)}.ID() }

func randomHex() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// signedRegistry pushes images to the test registry and signs them.
type signedRegistry struct {
	t    *testing.T
	reg  podmantest.Registry
	repo string
}

// push pushes a new image (containerfile lines after FROM) under tag
// (a new one when empty) and returns the tag and the digest.
func (s signedRegistry) push(tag, lines string) (string, string) {
	s.t.Helper()
	if tag == "" {
		tag = s.reg.Addr + "/" + s.repo + ":t-" + randomHex()
	}
	ref := podmantest.PushImageAs(s.t, s.reg, tag, "FROM "+podmantest.BaseImage+"\nLABEL fleet.test.unique="+randomHex()+"\n"+lines)
	_, d, _ := strings.Cut(ref, "@")
	return tag, d
}

func (s signedRegistry) sign(tag, digest string, k sigKey) {
	s.t.Helper()
	repo, _, _ := strings.Cut(tag, ":t-")
	err := imagesig.Sign(s.t.Context(), imagesig.SignOptions{Pushed: repo + "@" + digest, Tag: tag, PrivateKey: k.private,
		Passphrase: k.passphrase, Auth: &imagesig.Auth{Username: s.reg.Username, Password: s.reg.Password}})
	if err != nil {
		s.t.Fatalf("sign %s: %v", tag, err)
	}
}

// TestADeviceRunsOnlyImagesATrustedKeySignedOnRealPodman: with a
// signature policy, the agent checks the digest Podman pulled against the
// registry's signatures before any container is created; a refusal names
// the container, the image, the digest, why and the keys tried, and
// changes nothing.
func TestADeviceRunsOnlyImagesATrustedKeySignedOnRealPodman(t *testing.T) {
	reg := podmantest.TestRegistry(t)
	sr := signedRegistry{t: t, reg: reg, repo: "fleet-agent-test/signed-" + randomHex()}
	ci, attacker, next := newSigKey(t, "ci"), newSigKey(t, "attacker"), newSigKey(t, "ci-next")

	signedTag, signedDigest := sr.push("", runsFile)
	sr.sign(signedTag, signedDigest, ci)
	initTag, initDigest := sr.push("", exit0File)
	sr.sign(initTag, initDigest, ci)
	unsignedTag, unsignedDigest := sr.push("", runsFile)
	otherTag, otherDigest := sr.push("", runsFile)
	sr.sign(otherTag, otherDigest, attacker)
	// The tag a trusted key signed now names another image.
	movedTag, movedDigest := sr.push("", runsFile)
	sr.sign(movedTag, movedDigest, ci)
	_, retaggedDigest := sr.push(movedTag, runsFile)
	nextTag, nextDigest := sr.push("", runsFile)
	sr.sign(nextTag, nextDigest, next)
	// The registry's attachment is replaced by one holding the
	// attacker's signature of the same digest only.
	replacedTag, replacedDigest := sr.push("", runsFile)
	sr.sign(replacedTag, replacedDigest, attacker)
	attackers := podmantest.GetManifest(t, reg, sr.repo, podmantest.SignatureTag(replacedDigest))
	sr.sign(replacedTag, replacedDigest, ci)
	podmantest.PutManifest(t, reg, sr.repo, podmantest.SignatureTag(replacedDigest), attackers)

	v, err := imagesig.NewVerifier()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	pull := fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, reg.Addr, reg.Username, reg.Password)
	only := func(keys ...sigKey) *events.SignaturePolicy {
		p := &events.SignaturePolicy{}
		for _, k := range keys {
			p.Keys = append(p.Keys, k.policyKey())
		}
		return p
	}
	tests := []struct {
		name      string
		init      string // image of the init container; "" for none
		image     string
		policy    *events.SignaturePolicy
		want      error
		refused   string // the container whose image is refused
		digest    string
		reason    string
		keysTried []sigKey
	}{
		{"a signed service and a signed init container run", initTag, signedTag, only(ci), nil, "", "", "", nil},
		{"an unsigned image is refused", "", unsignedTag, only(ci), imagesig.ErrNoSignature,
			"service api", unsignedDigest, "the registry holds no signature for this digest", []sigKey{ci}},
		{"an image another key signed is refused", "", otherTag, only(ci), imagesig.ErrUntrusted,
			"service api", otherDigest, "its signature was not made by a trusted key", []sigKey{ci}},
		{"a re-tagged image, whose digest is not the signed one, is refused", "", movedTag, only(ci), imagesig.ErrNoSignature,
			"service api", retaggedDigest, "the registry holds no signature for this digest", []sigKey{ci}},
		{"an image whose signature was replaced in the registry is refused", "", replacedTag, only(ci), imagesig.ErrUntrusted,
			"service api", replacedDigest, "its signature was not made by a trusted key", []sigKey{ci}},
		{"an unsigned init container is refused before it runs", unsignedTag, signedTag, only(ci), imagesig.ErrNoSignature,
			"init container migrate", unsignedDigest, "the registry holds no signature for this digest", []sigKey{ci}},
		{"with two trusted keys an image the new key signed runs", "", nextTag, only(ci, next), nil, "", "", "", nil},
		{"with two trusted keys an image the old key signed runs", "", signedTag, only(ci, next), nil, "", "", "", nil},
		{"without a policy an unsigned image runs as before", "", unsignedTag, nil, nil, "", "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newPodmanWorld(t)
			w.r.Credentials = creds{"hub": pull}
			w.r.Verifier = v
			for _, ref := range []string{tt.image, tt.init} {
				if ref != "" {
					_ = podmantest.RemoveImage(t, ref) // pulled now, by this pass
				}
			}
			s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: tt.image, ImagePullSecret: "hub"}}}}
			if tt.init != "" {
				s.Data.InitContainer = &score.Service{Name: w.name("migrate"), Image: tt.init, ImagePullSecret: "hub"}
			}
			e := w.entry(1, s)
			e.Signatures = tt.policy
			err := w.r.Apply(w.ctx, e)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if c := w.byName()[w.name("api")]; c.State != runtime.StateRunning {
					t.Errorf("the service is %q, want running", c.State)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Apply = %v, want %v", err, tt.want)
			}
			var pe *agent.PreflightError
			if !errors.As(err, &pe) {
				t.Fatalf("Apply = %T %v, want a *agent.PreflightError", err, err)
			}
			ids := make([]string, len(tt.keysTried))
			for i, k := range tt.keysTried {
				ids[i] = k.id()
			}
			refusedImage := tt.image
			if strings.HasPrefix(tt.refused, "init") {
				refusedImage = tt.init
			}
			refused := strings.Replace(strings.Replace(tt.refused, "api", w.name("api"), 1), "migrate", w.name("migrate"), 1)
			want := fmt.Sprintf("preflight: %s: image %s (digest %s) is not signed by a trusted key: %s; keys tried: %s",
				refused, refusedImage, tt.digest, tt.reason, strings.Join(ids, ", "))
			if diff := cmp.Diff(want, err.Error()); diff != "" {
				t.Errorf("reason (-want +got):\n%s", diff)
			}
			if strings.Contains(err.Error(), reg.Password) {
				t.Error("the refusal shows the registry password")
			}
			// The engine is shared: only this world's names count.
			got := w.byName()
			for _, n := range []string{w.name("api"), w.name("migrate")} {
				if c, ok := got[n]; ok {
					t.Errorf("a refused revision created %s (%s)", n, c.State)
				}
			}
		})
	}
}

// TestARefusedRevisionLeavesTheRunningOneRunningOnRealPodman: the next
// revision's unsigned image stops nothing and starts nothing.
func TestARefusedRevisionLeavesTheRunningOneRunningOnRealPodman(t *testing.T) {
	reg := podmantest.TestRegistry(t)
	sr := signedRegistry{t: t, reg: reg, repo: "fleet-agent-test/signed-keep-" + randomHex()}
	ci := newSigKey(t, "ci")
	signedTag, signedDigest := sr.push("", runsFile)
	sr.sign(signedTag, signedDigest, ci)
	// The unsigned image under the same tag, deployed by digest.
	_, unsignedDigest := sr.push(signedTag, runsFile)
	repo, _, _ := strings.Cut(signedTag, ":t-")

	v, err := imagesig.NewVerifier()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	w := newPodmanWorld(t)
	w.r.Credentials = creds{"hub": fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, reg.Addr, reg.Username, reg.Password)}
	w.r.Verifier = v
	policy := &events.SignaturePolicy{Keys: []events.SignatureKey{ci.policyKey()}}
	deploy := func(gen int64, image string) error {
		s := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: image, ImagePullSecret: "hub"}}}}
		e := w.entry(gen, s)
		e.Signatures = policy
		return w.r.Apply(w.ctx, e)
	}
	if err := deploy(1, repo+"@"+signedDigest); err != nil {
		t.Fatal(err)
	}
	before, err := w.rt.Inspect(w.ctx, w.name("api"))
	if err != nil {
		t.Fatal(err)
	}
	err = deploy(2, repo+"@"+unsignedDigest)
	if !errors.Is(err, imagesig.ErrNoSignature) || !strings.Contains(err.Error(), "no signature") {
		t.Fatalf("Apply of the unsigned revision = %v, want a refusal naming the missing signature", err)
	}
	after, err := w.rt.Inspect(w.ctx, w.name("api"))
	if err != nil {
		t.Fatal(err)
	}
	type kept struct {
		ID, Image string
		State     runtime.State
		Started   string
	}
	k := func(c runtime.Container) kept { return kept{c.ID, c.Image, c.State, c.StartedAt.String()} }
	if diff := cmp.Diff(k(before), k(after)); diff != "" {
		t.Errorf("the running revision's container changed (-before +after):\n%s", diff)
	}
	if after.State != runtime.StateRunning {
		t.Errorf("the running revision is %q", after.State)
	}
}

// tagMover is real Podman whose first Create is preceded by move: the tag
// moves to another image between the signature check and the create (a
// concurrent pull of the tag, a registry that re-pushed it).
type tagMover struct {
	runtime.Runtime
	move  func()
	moved bool
}

func (m *tagMover) Create(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	if !m.moved {
		m.moved = true
		m.move()
	}
	return m.Runtime.Create(ctx, spec)
}

// TestAContainerRunsTheVerifiedDigestWhenTheTagMovesAfterTheCheckOnRealPodman:
// with a policy the container is created from repo@<verified digest>, so
// an image pushed and pulled under the same tag after the check is not
// what runs.
func TestAContainerRunsTheVerifiedDigestWhenTheTagMovesAfterTheCheckOnRealPodman(t *testing.T) {
	reg := podmantest.TestRegistry(t)
	sr := signedRegistry{t: t, reg: reg, repo: "fleet-agent-test/signed-pin-" + randomHex()}
	ci := newSigKey(t, "ci")
	tag, signedDigest := sr.push("", runsFile)
	sr.sign(tag, signedDigest, ci)
	repo, _, _ := strings.Cut(tag, ":t-")

	v, err := imagesig.NewVerifier()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	w := newPodmanWorld(t)
	_ = podmantest.RemoveImage(t, tag)
	auth := &runtime.RegistryAuth{Username: reg.Username, Password: reg.Password}
	var movedDigest string
	w.r.Runtime = &tagMover{Runtime: w.rt, move: func() {
		_, movedDigest = sr.push(tag, runsFile)
		if err := w.rt.Pull(w.ctx, tag, auth); err != nil {
			t.Errorf("pull the moved tag: %v", err)
		}
	}}
	w.r.Credentials = creds{"hub": fmt.Sprintf(`{"registry":%q,"username":%q,"password":%q}`, reg.Addr, reg.Username, reg.Password)}
	w.r.Verifier = v
	e := w.entry(1, score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: w.name("api"), Image: tag, ImagePullSecret: "hub"}}}})
	e.Signatures = &events.SignaturePolicy{Keys: []events.SignatureKey{ci.policyKey()}}
	if err := w.r.Apply(w.ctx, e); err != nil {
		t.Fatal(err)
	}
	c, err := w.rt.Inspect(w.ctx, w.name("api"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := w.rt.ImageDigest(w.ctx, tag); err != nil || got != movedDigest || movedDigest == signedDigest {
		t.Fatalf("the local tag names %s (%v), want the moved image %s (the race did not happen)", got, err, movedDigest)
	}
	want := struct{ Image, Digest string }{repo + "@" + signedDigest, signedDigest}
	if diff := cmp.Diff(want, struct{ Image, Digest string }{c.Image, c.ImageDigest}); diff != "" {
		t.Errorf("the container does not run the verified digest (-want +got):\n%s", diff)
	}
}

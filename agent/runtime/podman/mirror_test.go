package podman_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/images"

	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// An image Podman holds under another repository with the same manifest
// digest (a mirror, or a registry the device pulled from before) is the
// image a reference by that digest names: Podman resolves the reference to
// it without pulling, and its digest must be known, or the agent refuses
// the image as "built or loaded on the device" when signatures are
// required (a getting-started run on a machine whose test registry had
// moved to another port failed so).
func TestAnImageHeldUnderAnotherRepositoryHasTheDigestItsReferencePins(t *testing.T) {
	rt, ctx := newRuntime(t)
	reg := podmantest.TestRegistry(t)
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	tag := "t-" + hex.EncodeToString(suffix)
	refs := podmantest.PushImageTo(t, reg, []string{
		reg.Addr + "/fleet-conformance/origin:" + tag, reg.Addr + "/fleet-conformance/mirror:" + tag,
	}, "FROM "+podmantest.BaseImage+"\n"+runningFile+"LABEL mirror="+tag+"\n")
	origin, mirror := refs[0], refs[1]
	_, want, _ := strings.Cut(origin, "@")
	if _, d, _ := strings.Cut(mirror, "@"); d != want {
		t.Fatalf("the registry holds the one image under two digests, %s and %s: the test needs the same", want, d)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = images.Remove(cctx, []string{origin}, new(images.RemoveOptions).WithForce(true).WithIgnore(true))
	})
	auth := runtime.RegistryAuth{Username: reg.Username, Password: reg.Password}
	if err := rt.Pull(ctx, origin, &auth); err != nil {
		t.Fatalf("Pull %s: %v", origin, err)
	}
	ok, err := rt.ImageExists(ctx, mirror)
	if err != nil || !ok {
		t.Fatalf("ImageExists(%s) = %v, %v: Podman resolves a reference by digest to the image holding it", mirror, ok, err)
	}
	if d, err := rt.ImageDigest(ctx, mirror); err != nil || d != want {
		t.Errorf("ImageDigest(%s) = %q, %v; want %q, the digest the reference pins and the image holds", mirror, d, err, want)
	}
	if d, err := rt.ImageDigest(ctx, origin); err != nil || d != want {
		t.Errorf("ImageDigest(%s) = %q, %v; want %q", origin, d, err, want)
	}
}

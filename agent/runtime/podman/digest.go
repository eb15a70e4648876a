package podman

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/containers/podman/v5/pkg/bindings/images"
	"go.podman.io/image/v5/docker/reference"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// ImageDigest returns the manifest digest Podman recorded when it pulled
// the local image ref from ref's repository (the image's RepoDigests):
// for a reference by digest, that digest when Podman holds the image by
// it, from ref's repository or another (the digest names the manifest);
// for a tag,
// the image's own digest when it was pulled from this repository,
// otherwise the first of the repository's. "" when the image has no
// digest from the repository (built or loaded on the device);
// runtime.ErrImageNotFound when ref is not present.
func (r *Runtime) ImageDigest(ctx context.Context, ref string) (string, error) {
	exists, err := images.Exists(r.call(ctx), ref, nil)
	if err != nil {
		return "", redact(fmt.Errorf("podman: image digest %s: %w", ref, err), nil)
	}
	if !exists {
		return "", fmt.Errorf("podman: image digest %s: %w", ref, runtime.ErrImageNotFound)
	}
	data, err := images.GetImage(r.call(ctx), ref, nil)
	if err != nil {
		return "", redact(fmt.Errorf("podman: image digest %s: %w", ref, err), nil)
	}
	if data == nil || data.ImageData == nil {
		return "", nil
	}
	return repoDigest(ref, data.Digest.String(), data.RepoDigests), nil
}

// repoDigest picks ref's digest among an image's repository digests
// ("host/repo@sha256:…"); own is the image's digest. See ImageDigest.
func repoDigest(ref, own string, repoDigests []string) string {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return ""
	}
	var mine []string
	for _, rd := range repoDigests {
		n, err := reference.ParseNormalizedNamed(rd)
		if err != nil {
			continue
		}
		if c, ok := n.(reference.Canonical); ok && n.Name() == named.Name() {
			mine = append(mine, c.Digest().String())
		}
	}
	if c, ok := named.(reference.Canonical); ok {
		want := c.Digest().String()
		if slices.Contains(mine, want) || own == want {
			return want
		}
		// The reference pins the manifest: an image Podman holds under
		// another repository with that manifest digest (a mirror, or a
		// registry the device pulled from before) is this one byte for
		// byte, and Podman resolves ref to it without pulling. Its
		// signatures are then read from ref's registry for that digest.
		for _, rd := range repoDigests {
			if n, err := reference.ParseNormalizedNamed(rd); err == nil {
				if other, ok := n.(reference.Canonical); ok && other.Digest().String() == want {
					return want
				}
			}
		}
		return ""
	}
	if own != "" && slices.Contains(mine, own) {
		return own
	}
	slices.SortFunc(mine, strings.Compare)
	if len(mine) > 0 {
		return mine[0]
	}
	return ""
}

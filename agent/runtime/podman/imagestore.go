package podman

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/images"
	"github.com/containers/podman/v5/pkg/bindings/system"
	"github.com/containers/podman/v5/pkg/domain/entities"
	"go.podman.io/image/v5/docker"
	"go.podman.io/image/v5/docker/reference"
	"go.podman.io/image/v5/image"
	"go.podman.io/image/v5/types"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

var _ runtime.ImageStore = (*Runtime)(nil)

// listTries is how many times localLayers lists the images.
const listTries = 5

// ImageStoreSpace reads the space of Podman's graph root as the Podman
// service sees it (its info: graphRootAllocated and graphRootUsed, which
// it measures with statfs), so the agent needs no access to the store's
// folder.
func (r *Runtime) ImageStoreSpace(ctx context.Context) (runtime.StoreSpace, error) {
	info, err := system.Info(r.call(ctx), nil)
	if err != nil {
		return runtime.StoreSpace{}, redact(fmt.Errorf("podman: info: %w", err), nil)
	}
	if info == nil || info.Store == nil {
		return runtime.StoreSpace{}, fmt.Errorf("podman: info has no store")
	}
	st := info.Store
	if st.GraphRootAllocated == 0 || st.GraphRootUsed > st.GraphRootAllocated || st.GraphRootAllocated > math.MaxInt64 {
		return runtime.StoreSpace{}, fmt.Errorf("podman: info reports no usable size for the graph root %s (allocated %d, used %d)",
			st.GraphRoot, st.GraphRootAllocated, st.GraphRootUsed)
	}
	return runtime.StoreSpace{Path: st.GraphRoot, Free: int64(st.GraphRootAllocated - st.GraphRootUsed), Size: int64(st.GraphRootAllocated)}, nil
}

// MissingLayers reads ref's manifest and image configuration from its
// registry, in the agent's process, with the containers/image library
// Podman pulls with (the same registries and certificate configuration of
// the host), and returns the layers whose uncompressed digests (the
// configuration's rootfs.diff_ids) no local image has. A manifest whose
// layers and diff_ids do not pair up counts every layer; so does a store
// whose images cannot be listed. Registry failures
// are *runtime.PullErrors worded as Pull's.
func (r *Runtime) MissingLayers(ctx context.Context, ref string, auth *runtime.RegistryAuth) ([]runtime.Layer, error) {
	return r.layers(ctx, ref, auth, true)
}

var _ runtime.ManifestSizer = (*Runtime)(nil)

// ManifestLayers is MissingLayers without listing the local images: every
// layer of ref's manifest counts (none when ref is present).
func (r *Runtime) ManifestLayers(ctx context.Context, ref string, auth *runtime.RegistryAuth) ([]runtime.Layer, error) {
	return r.layers(ctx, ref, auth, false)
}

// layers reads ref's manifest and configuration and returns its layers,
// leaving out, with onlyMissing, those a local image has.
func (r *Runtime) layers(ctx context.Context, ref string, auth *runtime.RegistryAuth, onlyMissing bool) ([]runtime.Layer, error) {
	var secrets []string
	if auth != nil {
		secrets = append(secrets, auth.Password)
	}
	exists, err := images.Exists(r.call(ctx), ref, nil)
	if err != nil {
		return nil, redact(fmt.Errorf("podman: image exists %s: %w", ref, err), nil)
	}
	if exists {
		return nil, nil
	}
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return nil, fmt.Errorf("podman: image %q: %w", ref, err)
	}
	dref, err := docker.NewReference(reference.TagNameOnly(named))
	if err != nil {
		return nil, fmt.Errorf("podman: image %q: %w", ref, err)
	}
	sys := &types.SystemContext{DockerRegistryUserAgent: "fleet-agent"}
	if auth != nil {
		sys.DockerAuthConfig = &types.DockerAuthConfig{Username: auth.Username, Password: auth.Password}
	}
	failed := func(err error) error {
		if ctx.Err() != nil {
			return redact(fmt.Errorf("podman: manifest of %s: %w", ref, ctx.Err()), ctx.Err(), secrets...)
		}
		return pullError(ref, auth, err, secrets)
	}
	src, err := dref.NewImageSource(ctx, sys)
	if err != nil {
		return nil, failed(err)
	}
	defer src.Close()
	img, err := image.FromUnparsedImage(ctx, sys, image.UnparsedInstance(src, nil))
	if err != nil {
		return nil, failed(err)
	}
	infos := img.LayerInfos()
	cfg, err := img.OCIConfig(ctx)
	if err != nil {
		return nil, failed(err)
	}
	// Without the local layers every layer counts: the preflight errs on
	// the side of room.
	var local map[string]bool
	err = errNotListed
	if onlyMissing {
		local, err = r.localLayers(ctx)
	}
	paired := err == nil && len(cfg.RootFS.DiffIDs) == len(infos)
	var out []runtime.Layer
	for i, l := range infos {
		if paired && local[cfg.RootFS.DiffIDs[i].String()] {
			continue
		}
		out = append(out, runtime.Layer{Digest: l.Digest.String(), Size: l.Size})
	}
	return out, nil
}

// errNotListed: the local images were not listed (ManifestLayers).
var errNotListed = errors.New("local images not listed")

// localLayers are the uncompressed layer digests of every local image
// (the tagged and untagged ones; an intermediate image's layers are its
// child's too). A list that fails is tried again, up to listTries times:
// an image removed while Podman lists is one of its failures.
func (r *Runtime) localLayers(ctx context.Context) (map[string]bool, error) {
	var list []*entities.ImageSummary
	var err error
	for try := range listTries {
		if list, err = images.List(r.call(ctx), nil); err == nil || ctx.Err() != nil {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(try+1) * 200 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, redact(fmt.Errorf("podman: list images: %w", err), nil)
	}
	out := map[string]bool{}
	for _, s := range list {
		data, err := images.GetImage(r.call(ctx), s.ID, nil)
		if err != nil {
			continue // removed meanwhile: its layers count as missing
		}
		if data == nil || data.ImageData == nil || data.RootFS == nil {
			continue
		}
		for _, d := range data.RootFS.Layers {
			out[d.String()] = true
		}
	}
	return out, nil
}

var _ runtime.ImagePruner = (*Runtime)(nil)

// DeleteImage removes the local image ref without force: Podman refuses
// an image a container uses (runtime.ErrImageInUse) and removes only the
// name when the image has others.
func (r *Runtime) DeleteImage(ctx context.Context, ref string) error {
	_, errs := images.Remove(r.call(ctx), []string{ref}, nil)
	if len(errs) == 0 {
		return nil
	}
	err := errs[0]
	msg := err.Error()
	switch {
	case strings.Contains(msg, "image is in use") || strings.Contains(msg, "being used by") || strings.Contains(msg, "in use by"):
		return fmt.Errorf("podman: remove image %s: %w", ref, runtime.ErrImageInUse)
	case strings.Contains(msg, "image not known") || strings.Contains(msg, "no such image"):
		return fmt.Errorf("podman: remove image %s: %w", ref, runtime.ErrImageNotFound)
	}
	return redact(fmt.Errorf("podman: remove image %s: %w", ref, err), nil)
}

package sim

import (
	"context"
	"fmt"
	"slices"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

var _ runtime.ImageStore = (*Runtime)(nil)

// ImageStoreSpace is the simulated store's space: Options.StoreSize (or
// DefaultStoreSize), less Options.StoreUsed and the sizes of the layers
// pulled so far. Its path is "sim".
func (r *Runtime) ImageStoreSpace(ctx context.Context) (runtime.StoreSpace, error) {
	if err := r.down("imagestorespace"); err != nil {
		return runtime.StoreSpace{}, err
	}
	if err := ctx.Err(); err != nil {
		return runtime.StoreSpace{}, fmt.Errorf("sim: image store space: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	size := r.storeSize
	if size == 0 {
		size = DefaultStoreSize
	}
	free := size - r.storeUsed
	for _, n := range r.layers {
		if n > 0 {
			free -= n
		}
	}
	return runtime.StoreSpace{Path: "sim", Free: max(free, 0), Size: size}, nil
}

// SetStoreUsed sets the bytes of the simulated store's file system taken
// by files that are not the engine's (Options.StoreUsed).
func (r *Runtime) SetStoreUsed(n int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.storeUsed = n
}

// MissingLayers returns the layers of the registry's ref (RegistryImage
// Layers) the store has not pulled yet; none when ref is present locally.
// It fails as Pull does: runtime.ErrRegistryUnavailable, then
// runtime.ErrImageNotFound, then runtime.ErrAuth, each a
// *runtime.PullError.
func (r *Runtime) MissingLayers(ctx context.Context, ref string, auth *runtime.RegistryAuth) ([]runtime.Layer, error) {
	if err := r.down("missinglayers"); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sim: missing layers %s: %w", ref, err)
	}
	if r.registryDown.Load() || r.unreachable[runtime.ImageAuthority(ref)] {
		return nil, runtime.NewPullError(ref, auth, runtime.ErrRegistryUnavailable, runtime.PullCauseRefused, "connection refused")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.images[ref] {
		return nil, nil
	}
	img, ok := r.registry[ref]
	if !ok {
		return nil, runtime.NewPullError(ref, auth, runtime.ErrImageNotFound, runtime.PullCauseNotFound, "manifest unknown")
	}
	if img.Auth != nil && (auth == nil || *auth != *img.Auth) {
		return nil, runtime.NewPullError(ref, auth, runtime.ErrAuth, runtime.PullCauseAuth, "unauthorized: authentication required")
	}
	var out []runtime.Layer
	for _, l := range img.Layers {
		if _, have := r.layers[l.Digest]; !have && !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	return out, nil
}

var _ runtime.ImagePruner = (*Runtime)(nil)

// DeleteImage removes the local image ref unless a container uses it
// (runtime.ErrImageInUse), with its layers no other local image of the
// registry has; runtime.ErrImageNotFound when it is not present.
func (r *Runtime) DeleteImage(ctx context.Context, ref string) error {
	if err := r.down("deleteimage"); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sim: delete image %s: %w", ref, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.images[ref] {
		return fmt.Errorf("sim: delete image %s: %w", ref, runtime.ErrImageNotFound)
	}
	for _, c := range r.byID {
		if c.spec.Image == ref {
			return fmt.Errorf("sim: delete image %s: container %s uses it: %w", ref, c.spec.Name, runtime.ErrImageInUse)
		}
	}
	delete(r.images, ref)
	kept := map[string]bool{}
	for other := range r.images {
		for _, l := range r.registry[other].Layers {
			kept[l.Digest] = true
		}
	}
	for _, l := range r.registry[ref].Layers {
		if !kept[l.Digest] {
			delete(r.layers, l.Digest)
		}
	}
	return nil
}

package runtime

import (
	"context"
	"errors"
)

// Layer is one layer of an image as its registry's manifest describes it.
type Layer struct {
	// Digest is the digest of the layer's blob as the manifest names it
	// ("sha256:…").
	Digest string
	// Size is the blob's size in bytes as the manifest claims it (the
	// compressed size for a compressed layer). It is the registry's
	// word, unchecked: negative or absurd values are the caller's to
	// refuse.
	Size int64
}

// StoreSpace is the space of the file system that holds an engine's
// images.
type StoreSpace struct {
	// Path is where the store lives (Podman's graph root), for messages.
	Path string
	// Free is how many bytes can still be written there.
	Free int64
	// Size is the file system's size in bytes.
	Size int64
}

// ImageStore is what a Runtime reports of its image store for the agent's
// disk preflight (docs/adr/0028-image-store-preflight.md). It is not part
// of Runtime: a runtime without it gets no disk preflight. runtime/podman
// and runtime/sim implement it, and runtimetest checks both.
type ImageStore interface {
	// ImageStoreSpace returns the space of the file system the images
	// live on.
	ImageStoreSpace(ctx context.Context) (StoreSpace, error)
	// MissingLayers reads ref's manifest from its registry (for a
	// manifest list, the instance the engine would pull for its
	// platform) with auth (nil: anonymous) and returns the layers the
	// local store lacks, in manifest order, with the sizes the manifest
	// claims. None when ref is present locally. A failure the registry
	// (or the way to it) caused is a *PullError, as Pull's is.
	MissingLayers(ctx context.Context, ref string, auth *RegistryAuth) ([]Layer, error)
}

// ManifestSizer is an ImageStore that can also size every layer of an
// image from its registry's manifest without asking which of them the
// local store has: the preflight's cheap first question. Which layers a
// store has is an answer that grows with the store (Podman lists and
// inspects every local image for it); when the whole of every image fits,
// the preflight never asks it.
type ManifestSizer interface {
	// ManifestLayers is MissingLayers counting every layer of ref's
	// manifest, present locally or not (none when ref itself is
	// present), with MissingLayers' failures.
	ManifestLayers(ctx context.Context, ref string, auth *RegistryAuth) ([]Layer, error)
}

// ErrImageInUse: a container (of any state, the agent's or not) uses the
// image, so the engine keeps it.
var ErrImageInUse = errors.New("image in use by a container")

// ImagePruner removes images the agent no longer needs (ADR 0028). Like
// ImageStore it is not part of Runtime; runtime/podman and runtime/sim
// implement it.
type ImagePruner interface {
	// DeleteImage removes the local image ref (its name; the layers no
	// other image has go with it). ErrImageInUse when a container uses it
	// (nothing is removed); ErrImageNotFound when it is not present.
	DeleteImage(ctx context.Context, ref string) error
}

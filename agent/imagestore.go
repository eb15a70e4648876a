package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// DefaultImageStoreMargin is the space the disk preflight keeps free in
// the image store after a revision's pulls (--image-store-margin).
const DefaultImageStoreMargin int64 = 512 << 20

// LayerExpansion is how many bytes of the image store the disk preflight
// counts for each byte of a missing layer's blob as the registry's
// manifest sizes it: the unpacked layer (gzip'd layers unpack to about 2
// to 2.5 times their size) and the blob while it is pulled (ADR 0028).
const LayerExpansion = 3

// MaxLayerSize is the largest layer size a manifest may claim: a claim
// above it (or below zero) is refused as a hostile or broken registry's.
const MaxLayerSize int64 = 1 << 40

// ImageStoreMarginFlag is the agent's flag that sets the margin; errors
// name it.
const ImageStoreMarginFlag = "--image-store-margin"

// ErrImageStoreFull: the images a revision lacks do not fit in the image
// store with the margin (an *ImageStoreError).
var ErrImageStoreFull = errors.New("the image store has no room for the revision's images")

// ErrManifestSize: a registry's manifest claims a layer size below zero or
// above MaxLayerSize.
var ErrManifestSize = errors.New("the registry's manifest claims an impossible layer size")

// ImageNeed is what one image of a revision needs in the image store.
type ImageNeed struct {
	// Image is the reference the score names.
	Image string
	// Layers is how many of its layers the store lacks.
	Layers int
	// Compressed is the sum of their sizes as the manifest claims them.
	Compressed int64
	// Bytes is what the preflight counts for them: Compressed times
	// LayerExpansion.
	Bytes int64
}

// ImageStoreError: the images a revision lacks do not fit in the image
// store. Nothing was pulled or changed.
type ImageStoreError struct {
	// Images are the images with missing layers, in the score's order.
	Images []ImageNeed
	// Path is the store's place (Podman's graph root).
	Path string
	// Free is what the store's file system has free.
	Free int64
	// Margin is the space kept free after the pulls.
	Margin int64
}

// Needed is what the images need plus the margin.
func (e *ImageStoreError) Needed() int64 {
	n := e.Margin
	for _, i := range e.Images {
		n = addSat(n, i.Bytes)
	}
	return n
}

// Error names every image with what it needs, the bytes free, the
// shortfall and the flag to change.
func (e *ImageStoreError) Error() string {
	var parts []string
	for _, i := range e.Images {
		parts = append(parts, fmt.Sprintf("image %s needs %s (%d missing layers of %s compressed, ×%d unpacked)",
			i.Image, FormatBytes(i.Bytes), i.Layers, FormatBytes(i.Compressed), LayerExpansion))
	}
	needed := e.Needed()
	return fmt.Sprintf("%s: %s; with the margin of %s that makes %s, but %s are free in %s: %s short; "+
		"free space on the device (prune unused images) or lower the agent's %s",
		ErrImageStoreFull, strings.Join(parts, "; "), FormatBytes(e.Margin), FormatBytes(needed),
		FormatBytes(e.Free), e.Path, FormatBytes(needed-e.Free), ImageStoreMarginFlag)
}

// Is makes errors.Is(err, ErrImageStoreFull) true.
func (e *ImageStoreError) Is(target error) bool { return target == ErrImageStoreFull }

// imageStoreMargin is the margin the preflight keeps: 0 means
// DefaultImageStoreMargin, below zero none.
func (r *Reconciler) imageStoreMargin() int64 {
	switch {
	case r.ImageStoreMargin == 0:
		return DefaultImageStoreMargin
	case r.ImageStoreMargin < 0:
		return 0
	}
	return r.ImageStoreMargin
}

// checkImageStore is the disk preflight (ADR 0028): before any pull, the
// layers the store lacks of every image of svcs, as the registry's
// manifests size them, times LayerExpansion, plus the margin, must fit in
// what the store has free. A *PreflightError with an *ImageStoreError
// when they do not, or with ErrManifestSize when a manifest's sizes are
// impossible. An image whose manifest cannot be read (no such image, a
// refused credential, a registry down) is left to its pull, which reports
// it as it always does; so is everything when the store's space cannot be
// read. An ImageStore that is a runtime.ManifestSizer is first asked for
// every layer of the images, present or not: when they all fit the
// check ends there, without asking which layers the store has (on Podman
// a list and an inspect of every local image, the check's cost on a store
// of many images). Without ImageStore it does nothing.
func (r *Reconciler) checkImageStore(ctx context.Context, svcs []resolvedService) error {
	if r.ImageStore == nil {
		return nil
	}
	type lacking struct {
		svc  resolvedService
		auth *runtime.RegistryAuth
	}
	var todo []lacking
	seen := map[string]bool{}
	for _, s := range svcs {
		if seen[s.Image] {
			continue
		}
		seen[s.Image] = true
		if ok, err := r.rt().ImageExists(ctx, s.Image); err != nil || ok {
			continue // present, or the pull's own check reports the engine
		}
		auth, err := r.pullAuth(ctx, s.Service)
		if err != nil {
			continue // ensureImage reports it
		}
		todo = append(todo, lacking{s, auth})
	}
	if len(todo) == 0 {
		return nil
	}
	// The cheap question first: when every layer of every image fits,
	// which of them the store already has does not matter.
	if ms, ok := r.ImageStore.(runtime.ManifestSizer); ok {
		fits := func() bool {
			var needs []ImageNeed
			for _, l := range todo {
				layers, err := ms.ManifestLayers(ctx, l.svc.Image, l.auth)
				if err != nil {
					return false // the full check below says what it is
				}
				need, err := imageNeed(l.svc.Image, layers)
				if err != nil {
					return false
				}
				needs = append(needs, need)
			}
			space, err := r.ImageStore.ImageStoreSpace(ctx)
			if err != nil {
				return false
			}
			e := &ImageStoreError{Images: needs, Free: space.Free, Margin: r.imageStoreMargin()}
			return e.Needed() <= space.Free
		}
		if fits() {
			return nil
		}
	}
	var needs []ImageNeed
	for _, l := range todo {
		layers, err := r.ImageStore.MissingLayers(ctx, l.svc.Image, l.auth)
		if err != nil {
			r.log().DebugContext(ctx, "cannot read the image's manifest for the disk preflight; the pull will say why", "image", l.svc.Image, "error", err)
			continue
		}
		need, err := imageNeed(l.svc.Image, layers)
		if err != nil {
			return &PreflightError{Reason: l.svc.Name + ": " + err.Error(), Err: err}
		}
		if need.Layers > 0 {
			needs = append(needs, need)
		}
	}
	if len(needs) == 0 {
		return nil
	}
	space, err := r.ImageStore.ImageStoreSpace(ctx)
	if err != nil {
		r.log().WarnContext(ctx, "cannot read the image store's free space; pulling without the disk preflight", "error", err)
		return nil
	}
	e := &ImageStoreError{Images: needs, Path: space.Path, Free: space.Free, Margin: r.imageStoreMargin()}
	if e.Needed() > space.Free {
		return &PreflightError{Reason: e.Error(), Err: e}
	}
	return nil
}

// imageNeed sums the missing layers of image, refusing impossible sizes.
func imageNeed(image string, layers []runtime.Layer) (ImageNeed, error) {
	n := ImageNeed{Image: image}
	for _, l := range layers {
		if l.Size < 0 || l.Size > MaxLayerSize {
			return ImageNeed{}, fmt.Errorf("image %s: %w: layer %s is %d bytes by its manifest (allowed: 0 to %s); check the image in its registry",
				image, ErrManifestSize, l.Digest, l.Size, FormatBytes(MaxLayerSize))
		}
		n.Layers++
		n.Compressed = addSat(n.Compressed, l.Size)
	}
	n.Bytes = mulSat(n.Compressed, LayerExpansion)
	return n, nil
}

// addSat adds non-negative a and b, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// mulSat multiplies non-negative a by k > 0, saturating at math.MaxInt64.
func mulSat(a, k int64) int64 {
	if a > math.MaxInt64/k {
		return math.MaxInt64
	}
	return a * k
}

// FormatBytes writes n in binary units with one decimal ("1.5 GiB",
// "512 B"), and the exact byte count after it for anything above a KiB.
func FormatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	f, i := float64(n), 0
	for (f >= unit || f <= -unit) && i < 6 {
		f /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB (%d bytes)", f, "KMGTPE"[i-1], n)
}

// ParseSize reads a size flag: a count of bytes ("1048576") or one with a
// binary unit ("512MiB", "1GiB", "64KiB").
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("size %q: give a number of bytes, or one with KiB, MiB, GiB or TiB (e.g. 512MiB)", s)
	}
	return n * mult, nil
}

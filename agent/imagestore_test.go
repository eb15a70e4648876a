package agent_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/agent"
	"github.com/nationtech/harmony-fleet/agent/runtime"
	"github.com/nationtech/harmony-fleet/agent/runtime/sim"
	"github.com/nationtech/harmony-fleet/score"
)

const (
	bigImage     = "reg.example/big:v2"
	hostileImage = "reg.example/hostile:v1"
	mib          = int64(1) << 20
)

// diskWorld is a world whose registry serves bigImage (two layers of
// 100 MiB, one shared with api:v1 which is already pulled) and
// hostileImage (a layer of a negative size), and whose image store is
// 1 GiB, storeUsed of it taken by other files.
func diskWorld(t *testing.T, storeUsed int64) *world {
	shared := runtime.Layer{Digest: "sha256:shared", Size: 100 * mib}
	w := newWorld(t, func(o *sim.Options) {
		o.Registry[bigImage] = sim.RegistryImage{Layers: []runtime.Layer{shared, {Digest: "sha256:big", Size: 100 * mib}}}
		o.Registry["reg.example/base:v1"] = sim.RegistryImage{Layers: []runtime.Layer{shared}}
		o.Registry[hostileImage] = sim.RegistryImage{Layers: []runtime.Layer{{Digest: "sha256:hostile", Size: -5}}}
		o.StoreSize = 1 << 30
	})
	if err := w.rt.Pull(w.ctx, "reg.example/base:v1", nil); err != nil {
		t.Fatal(err)
	}
	w.rt.SetStoreUsed(storeUsed)
	w.r.ImageStore = w.rt
	w.r.ImageStoreMargin = 100 * mib
	return w
}

func TestTheDiskPreflightRefusesARevisionWhoseImagesDoNotFit(t *testing.T) {
	running := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: "reg.example/api:v1"}}}}
	tests := []struct {
		name      string
		storeUsed int64
		image     string
		want      error // nil: the revision is applied
		wantText  []string
	}{
		// Free: 1 GiB - 100 MiB (the shared layer) - used. Needed: 100 MiB
		// (the layer it lacks) × 3 + the 100 MiB margin = 400 MiB.
		{"an image whose missing layers fit with the margin is pulled and run", 500 * mib, bigImage, nil, nil},
		{"an image whose missing layers do not fit is refused, naming the shortfall and the flag", 600 * mib, bigImage,
			agent.ErrImageStoreFull, []string{
				"image reg.example/big:v2 needs 300.0 MiB (314572800 bytes) (1 missing layers of 100.0 MiB (104857600 bytes) compressed, ×3 unpacked)",
				"with the margin of 100.0 MiB (104857600 bytes) that makes 400.0 MiB (419430400 bytes)",
				"but 324.0 MiB (339738624 bytes) are free in sim",
				"76.0 MiB (79691776 bytes) short",
				"--image-store-margin",
			}},
		{"a manifest that claims a negative layer size is refused", 0, hostileImage,
			agent.ErrManifestSize, []string{"image reg.example/hostile:v1", "layer sha256:hostile is -5 bytes by its manifest"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := diskWorld(t, tt.storeUsed)
			if err := w.r.Apply(w.ctx, entry(t, 1, running)); err != nil {
				t.Fatal(err)
			}
			before := w.containers()["api"]
			next := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: tt.image}}}}
			err := w.r.Apply(w.ctx, entry(t, 2, next))
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				if c := w.containers()["api"]; c.Image != tt.image || c.State != runtime.StateRunning {
					t.Errorf("api after the pass: %+v", c)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			var pe *agent.PreflightError
			if !errors.As(err, &pe) {
				t.Errorf("%v is not a *PreflightError", err)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error does not say %q:\n%v", s, err)
				}
			}
			if ok, _ := w.rt.ImageExists(w.ctx, tt.image); ok {
				t.Error("the refused image was pulled")
			}
			after := w.containers()["api"]
			if diff := cmp.Diff(before, after); diff != "" {
				t.Errorf("the running service changed (-before +after):\n%s", diff)
			}
		})
	}
}

func TestParseSizeReadsBytesAndBinaryUnits(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want int64
		bad  bool
	}{
		{"a bare count is bytes", "1048576", 1 << 20, false},
		{"MiB are mebibytes", "512MiB", 512 << 20, false},
		{"GiB are gibibytes", "2GiB", 2 << 30, false},
		{"a negative size is refused", "-1", 0, true},
		{"a decimal unit is refused", "1GB", 0, true},
		{"an overflowing size is refused", "9999999999TiB", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := agent.ParseSize(tt.in)
			if (err != nil) != tt.bad || got != tt.want {
				t.Errorf("ParseSize(%q) = %d, %v", tt.in, got, err)
			}
		})
	}
}

// sizingStore is the simulator's image store with the cheap question of
// runtime.ManifestSizer (every layer of the registry's image), counting
// the questions about the local layers (MissingLayers).
type sizingStore struct {
	*sim.Runtime
	layers  map[string][]runtime.Layer
	missing int
}

func (s *sizingStore) ManifestLayers(ctx context.Context, ref string, auth *runtime.RegistryAuth) ([]runtime.Layer, error) {
	return s.layers[ref], nil
}

func (s *sizingStore) MissingLayers(ctx context.Context, ref string, auth *runtime.RegistryAuth) ([]runtime.Layer, error) {
	s.missing++
	return s.Runtime.MissingLayers(ctx, ref, auth)
}

// TestTheDiskPreflightAsksForTheLocalLayersOnlyWhenTheWholeImagesDoNotFit:
// with a store that can size whole images, a revision whose images fit
// whole is applied without the question about the local layers (on
// Podman a list of every local image); one that does not fit whole is
// judged on its missing layers, as without it.
func TestTheDiskPreflightAsksForTheLocalLayersOnlyWhenTheWholeImagesDoNotFit(t *testing.T) {
	running := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: "reg.example/api:v1"}}}}
	next := score.Score{Data: score.PodmanV0{Services: []score.Service{{Name: "api", Image: bigImage}}}}
	tests := []struct {
		name        string
		storeUsed   int64
		want        error
		wantMissing int
	}{
		// Whole: 200 MiB × 3 + the 100 MiB margin = 700 MiB; missing
		// layers only: 400 MiB. Free: 824 MiB - used.
		{"whole images that fit need no question about the local layers", 100 * mib, nil, 0},
		{"whole images that do not fit are judged on their missing layers, which fit", 500 * mib, nil, 1},
		{"missing layers that do not fit are refused", 600 * mib, agent.ErrImageStoreFull, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := diskWorld(t, tt.storeUsed)
			st := &sizingStore{Runtime: w.rt, layers: map[string][]runtime.Layer{
				bigImage: {{Digest: "sha256:shared", Size: 100 * mib}, {Digest: "sha256:big", Size: 100 * mib}}}}
			w.r.ImageStore = st
			if err := w.r.Apply(w.ctx, entry(t, 1, running)); err != nil {
				t.Fatal(err)
			}
			st.missing = 0
			if err := w.r.Apply(w.ctx, entry(t, 2, next)); !errors.Is(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
			if st.missing != tt.wantMissing {
				t.Errorf("MissingLayers asked %d times, want %d", st.missing, tt.wantMissing)
			}
		})
	}
}

package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// builtImage is one line of scripts/images.sh's output.
type builtImage struct {
	ref, id, size string
}

var (
	imagesOnce  sync.Once
	imagesBuilt map[string]builtImage // by binary name
	imagesErr   error
	imagesTook  time.Duration
)

// runImagesScript runs scripts/images.sh with the test's tag and output
// folder and returns its images by binary name.
func runImagesScript(ctx context.Context, tag, out string) (map[string]builtImage, error) {
	// The images an earlier run left under these tags are removed once
	// replaced, so runs do not pile up untagged images.
	previous := map[string]string{}
	for _, bin := range []string{"fleet-operator", "fleet-authcallout"} {
		if id, err := exec.CommandContext(ctx, "podman", "image", "inspect", "--format", "{{.Id}}", "localhost/fleet-test/"+bin+":"+tag).Output(); err == nil {
			previous[bin] = "sha256:" + strings.TrimPrefix(strings.TrimSpace(string(id)), "sha256:")
		}
	}
	defer func() {
		for _, id := range previous {
			_ = exec.Command("podman", "image", "rm", id).Run() // still tagged or in use: kept
		}
	}()
	cmd := exec.CommandContext(ctx, "bash", "../scripts/images.sh")
	cmd.Env = append(os.Environ(), "FLEET_IMAGE_PREFIX=localhost/fleet-test", "FLEET_IMAGE_TAG="+tag, "FLEET_IMAGES_OUT="+out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("scripts/images.sh: %w\n%s", err, stderr.String())
	}
	got := map[string]builtImage{}
	sc := bufio.NewScanner(bytes.NewReader(stdout))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return nil, fmt.Errorf("scripts/images.sh printed %q: want <reference> <id> <size>", sc.Text())
		}
		name := f[0][strings.LastIndex(f[0], "/")+1 : strings.LastIndex(f[0], ":")]
		got[name] = builtImage{ref: f[0], id: f[1], size: f[2]}
	}
	for _, want := range []string{"fleet-operator", "fleet-authcallout"} {
		if _, ok := got[want]; !ok {
			return nil, fmt.Errorf("scripts/images.sh built no %s image: %s", want, stdout)
		}
	}
	return got, nil
}

// images builds the control plane's images once per test binary with
// `task images`' script (the Go build cache makes a second build of
// unchanged binaries quick) and returns them by binary name.
func images(t *testing.T) map[string]builtImage {
	t.Helper()
	if _, err := exec.LookPath("buildah"); err != nil {
		testenv.Missing(t, "buildah", podmantest.SetupCommand, err)
	}
	imagesOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		began := time.Now()
		imagesBuilt, imagesErr = runImagesScript(ctx, "a", filepath.Join(os.TempDir(), fmt.Sprintf("fleet-images-%d-a", os.Getpid())))
		imagesTook = time.Since(began)
	})
	if imagesErr != nil {
		t.Fatal(imagesErr)
	}
	t.Logf("images built in %s: %v", imagesTook.Round(time.Second), imagesBuilt)
	return imagesBuilt
}

func TestTwoBuildsOfTheImagesAreTheSameImage(t *testing.T) {
	first := images(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	out := t.TempDir()
	began := time.Now()
	second, err := runImagesScript(ctx, "b", out)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second build (Go build cache warm): %s", time.Since(began).Round(time.Second))
	for name, a := range first {
		b := second[name]
		if a.id != b.id {
			t.Errorf("%s: two builds of one commit gave images %s and %s: the build is not reproducible", name, a.id, b.id)
		}
		inspect := podmanInspect(t, b.ref)
		if inspect.Config.User != "65532:65532" {
			t.Errorf("%s runs as %q, want the non-root 65532:65532", name, inspect.Config.User)
		}
		if len(inspect.Config.Entrypoint) != 1 || inspect.Config.Entrypoint[0] != "/"+name {
			t.Errorf("%s: entrypoint %q, want [/%s]", name, inspect.Config.Entrypoint, name)
		}
		for _, l := range []string{"org.opencontainers.image.title", "org.opencontainers.image.revision", "org.opencontainers.image.source",
			"org.opencontainers.image.version", "org.opencontainers.image.created"} {
			if inspect.Config.Labels[l] == "" {
				t.Errorf("%s has no label %s", name, l)
			}
		}
		if len(inspect.RootFS.Layers) != 1 {
			t.Errorf("%s has %d layers, want 1 (from scratch: the binary and the CA certificates)", name, len(inspect.RootFS.Layers))
		}
	}
	for _, bin := range []string{"fleet-operator", "fleet-authcallout"} {
		raw, err := exec.CommandContext(ctx, "go", "version", filepath.Join(out, bin)).CombinedOutput()
		if err != nil {
			t.Fatalf("go version %s: %v: %s", bin, err, raw)
		}
		// A static binary: go version -m would name CGO_ENABLED=1 otherwise.
		meta, err := exec.CommandContext(ctx, "go", "version", "-m", filepath.Join(out, bin)).CombinedOutput()
		if err != nil || !strings.Contains(string(meta), "CGO_ENABLED=0") || !strings.Contains(string(meta), "-trimpath=true") {
			t.Errorf("%s is not a static, trimmed build: %s", bin, meta)
		}
	}
}

// imageInspect is the part of `podman image inspect` the tests read.
type imageInspect struct {
	Size   int64
	Config struct {
		User       string
		Entrypoint []string
		Labels     map[string]string
	}
	RootFS struct {
		Layers []string
	}
}

func podmanInspect(t *testing.T, ref string) imageInspect {
	t.Helper()
	raw, err := exec.Command("podman", "image", "inspect", ref).Output()
	if err != nil {
		t.Fatalf("podman image inspect %s: %v", ref, err)
	}
	var got []imageInspect
	if err := json.Unmarshal(raw, &got); err != nil || len(got) != 1 {
		t.Fatalf("podman image inspect %s: %v", ref, err)
	}
	return got[0]
}

package podmantest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/containers/podman/v5/pkg/bindings/images"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

var (
	imagesMu sync.Mutex            // guards built
	built    = map[string]string{} // Containerfile → local reference
)

// BuildImage builds, once per process and content, a local image FROM
// BaseImage with the given Containerfile lines after the FROM line (a CMD,
// for example), and returns its reference (localhost/fleet-test/<name>:<hash>).
// It reuses an image of the same content left by an earlier run.
func BuildImage(tb testing.TB, name, tail string) string {
	tb.Helper()
	imagesMu.Lock()
	defer imagesMu.Unlock()
	containerfile := "FROM " + BaseImage + "\n" + tail
	if ref, ok := built[containerfile]; ok {
		return ref
	}
	sum := sha256.Sum256([]byte(containerfile))
	ref := "localhost/fleet-test/" + name + ":" + hex.EncodeToString(sum[:6])
	conn := Connect(tb)
	if ok, err := images.Exists(conn, ref, nil); err == nil && ok {
		built[containerfile] = ref
		return ref
	}
	buildah, err := exec.LookPath("buildah")
	if err != nil {
		testenv.Missing(tb, "buildah", SetupCommand, err)
	}
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(containerfile), 0o644); err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, buildah, "bud", "--quiet", "--pull=never", "--tag", ref,
		"--file", filepath.Join(dir, "Containerfile"), dir).CombinedOutput()
	if err != nil {
		tb.Fatalf("buildah bud %s: %v\n%s", ref, err, out)
	}
	built[containerfile] = ref
	return ref
}

// RemoveImage removes a local image if present (so a test can force a pull).
func RemoveImage(tb testing.TB, ref string) error {
	tb.Helper()
	conn := Connect(tb)
	if ok, err := images.Exists(conn, ref, nil); err != nil || !ok {
		return err
	}
	force := true
	_, errs := images.Remove(conn, []string{ref}, &images.RemoveOptions{Force: &force})
	return errors.Join(errs...)
}

package updater_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// buildBinary builds a static binary of pkg (a folder of the module) with
// main.version stamped, into a folder of its own others may read.
func buildBinary(t *testing.T, pkg, version string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-tags", "remote exclude_graphdriver_btrfs containers_image_openpgp",
		"-ldflags", "-X main.version="+version, "-o", bin, "./"+pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

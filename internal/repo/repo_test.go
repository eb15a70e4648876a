package repo_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/repo"
)

func TestRootIsFoundFromAPackageFolderAndNotOutside(t *testing.T) {
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "internal", "repo", "repo.go")); err != nil {
		t.Errorf("Root() = %s, which does not hold this package: %v", root, err)
	}
	t.Chdir(t.TempDir())
	if _, err := repo.Root(); !errors.Is(err, repo.ErrNoRoot) {
		t.Errorf("outside the repository: err = %v, want ErrNoRoot", err)
	}
}

package gitwork_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/gitwork"
)

func TestUnignoredNamesTheWorkTreeOnlyWhereGitWouldCommitTheFile(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on PATH: the product then counts every work tree path as not ignored")
	}
	tmp := t.TempDir()
	repo := filepath.Join(tmp, "repo")
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(repo, ".gitignore"), []byte("/ignored/\n*.secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(tmp, "outside")
	for _, tc := range []struct {
		name, path, want string
	}{
		{"a file at the root of a work tree is not ignored", filepath.Join(repo, "pi-1.json"), repo},
		{"a file in a subfolder that does not exist yet is not ignored", filepath.Join(repo, "keys", "pi-1.json"), repo},
		{"a file in an ignored folder is ignored", filepath.Join(repo, "ignored", "pi-1.json"), ""},
		{"a file matching an ignored pattern is ignored", filepath.Join(repo, "pi-1.secret"), ""},
		{"a file outside every work tree is in none", filepath.Join(outside, "pi-1.json"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := gitwork.Unignored(context.Background(), tc.path)
			if err != nil || got != tc.want {
				t.Errorf("Unignored(%s) = %q, %v; want %q", tc.path, got, err, tc.want)
			}
		})
	}
}

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

// TestUnignoredFollowsSymlinks: a key written through a symlink lands where
// the link points, so the work tree that counts is the target's.
func TestUnignoredFollowsSymlinks(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on PATH: the product then counts every work tree path as not ignored")
	}
	tmp := t.TempDir()
	repo := filepath.Join(tmp, "repo")
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(repo, ".gitignore"), []byte("/ignored/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"keys", "ignored"} {
		if err := os.Mkdir(filepath.Join(repo, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(tmp, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"keys":        filepath.Join(repo, "keys"),
		"ignored":     filepath.Join(repo, "ignored"),
		"pi-2.json":   filepath.Join(repo, "pi-2.json"), // dangling until written
		"relative":    filepath.Join("..", "repo", "keys"),
		"exists.json": filepath.Join(repo, "keys", "exists.json"),
	} {
		if err := os.Symlink(target, filepath.Join(home, link)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(repo, "keys", "exists.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	realRepo, err := filepath.EvalSymlinks(repo)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"a file in a folder linked into a work tree is in it", filepath.Join(home, "keys", "pi-1.json"), realRepo},
		{"a file in a new subfolder of a folder linked into a work tree is in it", filepath.Join(home, "keys", "new", "pi-1.json"), realRepo},
		{"a file through a relative link into a work tree is in it", filepath.Join(home, "relative", "pi-1.json"), realRepo},
		{"a link to a file not written yet in a work tree is in it", filepath.Join(home, "pi-2.json"), realRepo},
		{"a link to a file of a work tree is in it", filepath.Join(home, "exists.json"), realRepo},
		{"a file in a linked ignored folder is ignored", filepath.Join(home, "ignored", "pi-1.json"), ""},
		{"a file beside the links is in no work tree", filepath.Join(home, "pi-3.json"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := gitwork.Unignored(context.Background(), tc.path)
			if err != nil || got != tc.want {
				t.Errorf("Unignored(%s) = %q, %v; want %q", tc.path, got, err, tc.want)
			}
		})
	}
}

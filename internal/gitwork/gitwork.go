// Package gitwork tells whether a file would land in a git work tree that
// does not ignore it, where a `git add .` would commit it: `fleet enroll`
// asks it before writing a device's private key. It owns that question
// only, answered by the real git (check-ignore), and changes nothing.
package gitwork

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// Unignored returns the root of the git work tree that holds path when
// that work tree does not ignore path (its .gitignore files, the
// repository's info/exclude and the user's excludes, as `git check-ignore`
// reads them); "" when path is in no work tree, or is ignored. path need
// not exist. When git cannot answer (not installed, a repository it
// refuses), the path counts as not ignored and the error says why.
func Unignored(ctx context.Context, path string) (root string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("gitwork: %w", err)
	}
	root = workTree(filepath.Dir(abs))
	if root == "" {
		return "", nil
	}
	cmd := exec.CommandContext(ctx, "git", "-C", root, "check-ignore", "-q", "--", abs)
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "", nil // ignored
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return root, nil // not ignored
	default:
		return root, fmt.Errorf("gitwork: git check-ignore in %s: %w", root, err)
	}
}

// workTree returns the nearest folder from dir up that holds a .git entry
// (a folder, or the file of a linked work tree or submodule); "" when none
// does.
func workTree(dir string) string {
	for {
		if _, err := os.Lstat(filepath.Join(dir, ".git")); err == nil {
			return dir
		} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrPermission) {
			return dir // something is there
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

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
// not exist. Symlinks are followed: path's nearest existing folder is
// resolved, so a file under a linked folder counts in the work tree the
// link points into; when path itself is a symlink, the file it points to
// counts too (a writer that follows it lands there; one that replaces it
// by a rename lands beside it), and the first unignored of the two is
// answered. When git cannot answer (not installed, a repository it
// refuses), the path counts as not ignored and the error says why.
func Unignored(ctx context.Context, path string) (root string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("gitwork: %w", err)
	}
	candidates := []string{filepath.Join(resolveDir(filepath.Dir(abs)), filepath.Base(abs))}
	if target, ok := linkTarget(abs); ok {
		candidates = append(candidates, target)
	}
	for _, c := range candidates {
		if root, err = unignored(ctx, c); root != "" {
			return root, err
		}
	}
	return "", nil
}

// unignored is Unignored of abs, an absolute path whose folders hold no
// symlink.
func unignored(ctx context.Context, abs string) (root string, err error) {
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

// maxLinks bounds the symlinks linkTarget follows (a loop ends there).
const maxLinks = 40

// linkTarget returns where the symlink abs finally points (which need not
// exist), its folders resolved; false when abs is not a symlink.
func linkTarget(abs string) (string, bool) {
	p, linked := abs, false
	for range maxLinks {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			break
		}
		t, err := os.Readlink(p)
		if err != nil {
			break
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(p), t)
		}
		p, linked = filepath.Clean(t), true
		p = filepath.Join(resolveDir(filepath.Dir(p)), filepath.Base(p))
	}
	return p, linked
}

// resolveDir returns the absolute folder dir with the symlinks of its
// nearest existing ancestor (dir itself when it exists) resolved; the
// missing rest is appended as it is.
func resolveDir(dir string) string {
	d, rest := dir, ""
	for {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return dir
		}
		rest = filepath.Join(filepath.Base(d), rest)
		d = parent
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

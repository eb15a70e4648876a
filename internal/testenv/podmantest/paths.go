package podmantest

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// ErrNoRepoRoot reports that no enclosing directory holds the product's
// go.mod, so the run folder cannot be derived.
var ErrNoRepoRoot = errors.New("podmantest: repository root not found")

// RepoRoot returns the repository root (see testenv.RepoRoot); its error
// wraps ErrNoRepoRoot.
func RepoRoot() (string, error) {
	root, err := testenv.RepoRoot()
	if errors.Is(err, testenv.ErrNoRepoRoot) {
		return "", fmt.Errorf("%w: %w", ErrNoRepoRoot, err)
	}
	return root, err
}

// RunDir returns the run folder .cache/run/ at the repository root, where
// `task setup:podman` keeps the Podman socket, the registry credentials, PID
// files and logs.
func RunDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "run"), nil
}

// SocketPath returns the path of the Podman API socket that `task
// setup:podman` serves: .cache/run/podman.sock at the repository root.
func SocketPath() (string, error) {
	run, err := RunDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(run, "podman.sock"), nil
}

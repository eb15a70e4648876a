package podmantest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ErrNoRepoRoot reports that no enclosing directory holds the product's
// go.mod, so the run folder cannot be derived.
var ErrNoRepoRoot = errors.New("podmantest: repository root not found")

// modulePath is the product module; RepoRoot stops at the go.mod declaring it.
const modulePath = "github.com/nationtech/harmony-fleet"

// RepoRoot returns the repository root: the nearest enclosing directory of
// the working directory whose go.mod declares the product module. Tests run
// in their package folder, so this works from any package.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("podmantest: working directory: %w", err)
	}
	for {
		if isProductModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no go.mod declaring %s above the working directory", ErrNoRepoRoot, modulePath)
		}
		dir = parent
	}
}

func isProductModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == modulePath
		}
	}
	return false
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

// Package repo finds the Fleet repository a program runs in: `fleet dev`
// and the test harness locate their caches (.cache/) and the CRDs from it.
package repo

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ModulePath is the product module; RepoRoot stops at the go.mod declaring
// it.
const ModulePath = "github.com/nationtech/harmony-fleet"

// ErrNoRoot reports that no enclosing directory holds the product's
// go.mod.
var ErrNoRoot = errors.New("repository root not found")

// Root returns the repository root: the nearest enclosing directory of
// the working directory whose go.mod declares the product module. Tests run
// in their package folder, so this works from any package.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if isProductModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("%w: no go.mod declaring %s above the working directory", ErrNoRoot, ModulePath)
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
			return strings.Trim(strings.TrimSpace(rest), `"`) == ModulePath
		}
	}
	return false
}

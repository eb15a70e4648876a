package testenv

import "github.com/nationtech/harmony-fleet/internal/repo"

// ModulePath is the product module; RepoRoot stops at the go.mod declaring
// it.
const ModulePath = repo.ModulePath

// ErrNoRepoRoot reports that no enclosing directory holds the product's
// go.mod.
var ErrNoRepoRoot = repo.ErrNoRoot

// RepoRoot returns the repository root (see repo.Root).
func RepoRoot() (string, error) { return repo.Root() }

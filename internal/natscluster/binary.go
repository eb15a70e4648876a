package natscluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/nationtech/harmony-fleet/internal/repo"
)

// serverModule is the module whose main package is nats-server.
const serverModule = "github.com/nats-io/nats-server/v2"

// ServerVersion is the nats-server module version go.mod (in the
// repository at root) requires: the version Binary builds.
func ServerVersion(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}", serverModule)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("natscluster: go list -m %s: %w", serverModule, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("natscluster: go.mod requires no version of %s", serverModule)
	}
	return v, nil
}

// BinaryPath is where Binary keeps the nats-server binary of version in
// the repository at root: .cache/tools/nats-server-<version>/nats-server,
// beside the other cached tools.
func BinaryPath(root, version string) string {
	return filepath.Join(root, ".cache", "tools", "nats-server-"+version, "nats-server")
}

// Binary returns the path of the nats-server binary of the version in
// go.mod, building it once into the repository's cache (BinaryPath) with
// `go build` from the module cache. Concurrent callers (test binaries of
// several packages) take a lock file, so that one builds and the others
// wait and reuse it.
func Binary(ctx context.Context) (string, error) {
	root, err := repo.Root()
	if err != nil {
		return "", fmt.Errorf("natscluster: %w", err)
	}
	version, err := ServerVersion(ctx, root)
	if err != nil {
		return "", err
	}
	bin := BinaryPath(root, version)
	if fi, err := os.Stat(bin); err == nil && fi.Mode().IsRegular() {
		return bin, nil
	}
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		return "", fmt.Errorf("natscluster: %w", err)
	}
	lock, err := os.OpenFile(bin+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("natscluster: build lock: %w", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("natscluster: build lock: %w", err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()
	if _, err := os.Stat(bin); err == nil { // built while we waited
		return bin, nil
	}
	tmp := bin + ".tmp"
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, serverModule)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("natscluster: go build %s@%s (it needs the Go module proxy or a warm module cache): %w\n%s", serverModule, version, err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		return "", fmt.Errorf("natscluster: %w", err)
	}
	return bin, nil
}

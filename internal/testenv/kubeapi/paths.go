package kubeapi

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Versions of the binaries the harness runs. They must match tools/k8s/go.mod,
// tools/etcd/go.mod and scripts/setup-k8s.sh; a test checks that they do.
const (
	// KubernetesVersion is the version of kube-apiserver and kubectl, and the
	// name of the binary folder .cache/k8s-<KubernetesVersion>/.
	KubernetesVersion = "v1.37.2"
	// EtcdVersion is the version of etcd in the same folder.
	EtcdVersion = "v3.7.3"
)

// modulePath is the product module; RepoRoot stops at the go.mod declaring it.
const modulePath = "github.com/nationtech/harmony-fleet"

// Binary names inside BinDir.
const (
	apiServerBin = "kube-apiserver"
	etcdBin      = "etcd"
	kubectlBin   = "kubectl"
)

// SetupCommand is the command that builds the binaries this package needs.
const SetupCommand = "go tool -modfile=tools/go.mod task setup:k8s"

// component names what is missing in testenv.Missing messages.
const component = "kube-apiserver/etcd/kubectl"

// RepoRoot returns the repository root: the nearest enclosing directory of
// the working directory whose go.mod declares the product module. Tests run
// in their package folder, so this works from any package.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("kubeapi: working directory: %w", err)
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

// BinDir returns the folder that `task setup:k8s` fills with kube-apiserver,
// etcd and kubectl: .cache/k8s-<KubernetesVersion>/ at the repository root.
func BinDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "k8s-"+KubernetesVersion), nil
}

// checkBinaries returns an error wrapping ErrBinariesMissing when one of the
// three binaries is not an executable file in dir.
func checkBinaries(dir string) error {
	var missing []string
	for _, name := range []string{apiServerBin, etcdBin, kubectlBin} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not found in %s", ErrBinariesMissing, strings.Join(missing, ", "), dir)
	}
	return nil
}

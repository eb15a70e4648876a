package kubeapi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nationtech/harmony-fleet/dev/kubelocal"
	"github.com/nationtech/harmony-fleet/internal/testenv"
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

// Binary names inside BinDir.
const (
	apiServerBin = kubelocal.APIServerBin
	etcdBin      = kubelocal.EtcdBin
	kubectlBin   = kubelocal.KubectlBin
)

// SetupCommand is the command that builds the binaries this package needs.
const SetupCommand = "go tool -modfile=tools/go.mod task setup:k8s"

// component names what is missing in testenv.Missing messages.
const component = "kube-apiserver/etcd/kubectl"

// RepoRoot returns the repository root (see testenv.RepoRoot); its error
// wraps ErrNoRepoRoot.
func RepoRoot() (string, error) {
	root, err := testenv.RepoRoot()
	if errors.Is(err, testenv.ErrNoRepoRoot) {
		return "", fmt.Errorf("%w: %w", ErrNoRepoRoot, err)
	}
	return root, err
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

package dev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/dev/kubelocal"
	"github.com/nationtech/harmony-fleet/internal/repo"
)

// KubernetesVersion names the binary folder .cache/k8s-<version>/ that
// `task setup:k8s` fills; it must match internal/testenv/kubeapi (a test
// checks).
const KubernetesVersion = "v1.37.2"

// SetupK8sCommand builds kube-apiserver, etcd and kubectl.
const SetupK8sCommand = "go tool -modfile=tools/go.mod task setup:k8s"

// repoRoot returns the nearest enclosing folder of the working directory
// whose go.mod declares the Fleet module.
func repoRoot() (string, error) {
	root, err := repo.Root()
	if errors.Is(err, repo.ErrNoRoot) {
		return "", fmt.Errorf("%w: %w", ErrNoRepoRoot, err)
	}
	if err != nil {
		return "", fmt.Errorf("fleet dev: %w", err)
	}
	return root, nil
}

// DefaultKubeBinDir is <repository>/.cache/k8s-<KubernetesVersion>.
func DefaultKubeBinDir() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "k8s-"+KubernetesVersion), nil
}

// DefaultCRDDir is <repository>/k8s/config/crd.
func DefaultCRDDir() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "k8s", "config", "crd"), nil
}

// DefaultAdmissionDir is <repository>/k8s/config/admission.
func DefaultAdmissionDir() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "k8s", "config", "admission"), nil
}

// checkKubeBinaries fails with ErrKubeBinariesMissing, naming the setup
// command, when a binary is absent.
func checkKubeBinaries(dir string) error {
	var missing []string
	for _, b := range []string{"kube-apiserver", "etcd", "kubectl"} {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not in --kube-bin-dir %s: build them once with `%s` (about 15 minutes cold), then run fleet dev again",
			ErrKubeBinariesMissing, strings.Join(missing, ", "), dir, SetupK8sCommand)
	}
	return nil
}

// kube is a running etcd + kube-apiserver pair with the Fleet CRDs.
type kube struct {
	srv        *kubelocal.Server
	cfg        *rest.Config
	kubeconfig string
	kubectl    string
}

// startKube starts etcd (its data in <data>/etcd, kept across runs) and
// kube-apiserver on free loopback ports, installs (creates or updates) the
// CRDs and their admission policies and writes <data>/kubeconfig for the
// admin user.
func startKube(o Options) (*kube, error) {
	if err := checkKubeBinaries(o.KubeBinDir); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(o.CRDDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("fleet dev: --crd-dir %q is not a folder of CRD files: run from the repository or pass --crd-dir", o.CRDDir)
	}
	if fi, err := os.Stat(o.AdmissionDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("fleet dev: --admission-dir %q is not a folder of admission policies: run from the repository or pass --admission-dir", o.AdmissionDir)
	}
	etcdDir := filepath.Join(o.DataDir, "etcd")
	if err := os.MkdirAll(etcdDir, 0o700); err != nil {
		return nil, fmt.Errorf("fleet dev: etcd data folder: %w", err)
	}
	manifests := []string{o.AdmissionDir}
	// The ClusterRoles of Fleet's people beside the policies
	// (k8s/config/rbac): the dashboard writes as its users (ADR 0022).
	if rbac := filepath.Join(filepath.Dir(o.AdmissionDir), "rbac"); isDir(rbac) {
		manifests = append(manifests, rbac)
	}
	srv, err := kubelocal.Start(kubelocal.Options{
		BinDir:       o.KubeBinDir,
		CRDDirs:      []string{o.CRDDir},
		ManifestDirs: manifests,
		EtcdDataDir:  etcdDir,
		StartTimeout: 2 * time.Minute,
		StopTimeout:  time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("fleet dev: start etcd and kube-apiserver from %s: %w", o.KubeBinDir, err)
	}
	k := &kube{srv: srv, cfg: srv.Config, kubeconfig: filepath.Join(o.DataDir, "kubeconfig"), kubectl: srv.KubectlPath}
	if err := os.WriteFile(k.kubeconfig, srv.Kubeconfig, 0o600); err != nil {
		_ = srv.Stop()
		return nil, fmt.Errorf("fleet dev: write kubeconfig: %w", err)
	}
	return k, nil
}

// stop stops kube-apiserver and etcd; etcd's data folder stays.
func (k *kube) stop() error {
	if err := k.srv.Stop(); err != nil {
		return fmt.Errorf("fleet dev: stop etcd and kube-apiserver: %w", err)
	}
	return nil
}

// ensureNamespace creates the namespace unless it exists.
func ensureNamespace(ctx context.Context, c client.Client, name string) error {
	err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("fleet dev: create namespace %s: %w", name, err)
	}
	return nil
}

// addCoreScheme adds the core types (Namespace) to the Fleet scheme.
func addCoreScheme(s *apiruntime.Scheme) error {
	if err := corev1.AddToScheme(s); err != nil {
		return fmt.Errorf("fleet dev: scheme: %w", err)
	}
	return nil
}

// isDir reports whether path is a folder.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

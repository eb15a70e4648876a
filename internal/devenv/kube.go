package devenv

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
	"sigs.k8s.io/controller-runtime/pkg/envtest"

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
	env        *envtest.Environment
	cfg        *rest.Config
	kubeconfig string
	kubectl    string
}

// startKube starts etcd (its data in <data>/etcd, kept across runs) and
// kube-apiserver on free loopback ports, installs (creates or updates) the
// CRDs and writes <data>/kubeconfig for the admin user.
func startKube(o Options) (*kube, error) {
	if err := checkKubeBinaries(o.KubeBinDir); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(o.CRDDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("fleet dev: --crd-dir %q is not a folder of CRD files: run from the repository or pass --crd-dir", o.CRDDir)
	}
	etcdDir := filepath.Join(o.DataDir, "etcd")
	if err := os.MkdirAll(etcdDir, 0o700); err != nil {
		return nil, fmt.Errorf("fleet dev: etcd data folder: %w", err)
	}
	apiServer := &envtest.APIServer{Path: filepath.Join(o.KubeBinDir, "kube-apiserver")}
	// No controller-manager runs, so nobody would maintain the endpoints of
	// the "kubernetes" service, and loopback endpoints are refused anyway.
	apiServer.Configure().Set("endpoint-reconciler-type", "none")
	noExisting := false
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer:   apiServer,
			Etcd:        &envtest.Etcd{Path: filepath.Join(o.KubeBinDir, "etcd"), DataDir: etcdDir},
			KubectlPath: filepath.Join(o.KubeBinDir, "kubectl"),
		},
		CRDDirectoryPaths:        []string{o.CRDDir},
		ErrorIfCRDPathMissing:    true,
		UseExistingCluster:       &noExisting,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("fleet dev: start etcd and kube-apiserver from %s: %w", o.KubeBinDir, err)
	}
	k := &kube{env: env, cfg: cfg, kubeconfig: filepath.Join(o.DataDir, "kubeconfig"), kubectl: env.ControlPlane.KubectlPath}
	if err := os.WriteFile(k.kubeconfig, env.KubeConfig, 0o600); err != nil {
		_ = env.Stop()
		return nil, fmt.Errorf("fleet dev: write kubeconfig: %w", err)
	}
	return k, nil
}

// stop stops kube-apiserver and etcd; etcd's data folder stays.
func (k *kube) stop() error {
	if err := k.env.Stop(); err != nil {
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

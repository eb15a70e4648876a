// Package kubelocal starts a local Kubernetes API server: etcd and
// kube-apiserver from a folder of binaries, on free loopback ports, with
// controller-runtime's envtest. It owns that start and stop and nothing
// around it: the apiserver flags a control plane without controller-manager
// needs, the installation of the caller's CRDs (created or updated, waited
// for until established) and of the manifests shipped with them (admission
// policies, server-side applied), the admin *rest.Config and the kubeconfig
// bytes.
//
// Callers keep their own policy: where the binaries are and what to say when
// they are missing, where the kubeconfig file goes, and the records of child
// processes that outlive a killed run. Errors from Start and Stop carry no
// package prefix, so each caller words them ("fleet dev: …", "kubeapi: …").
//
// It is product code, not a test harness: `fleet dev` (internal/devenv, so
// cmd/fleet) and the API server test harness (internal/testenv/kubeapi) are
// the only packages that may import it (internal/hygiene checks).
package kubelocal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// FieldManager is the server-side-apply field manager of the objects of
// Options.ManifestDirs.
const FieldManager = "kubelocal"

// Binary names inside Options.BinDir.
const (
	APIServerBin = "kube-apiserver"
	EtcdBin      = "etcd"
	KubectlBin   = "kubectl"
)

// Options configures Start.
type Options struct {
	// BinDir holds kube-apiserver, etcd and kubectl. Required.
	BinDir string

	// CRDDirs lists folders of CustomResourceDefinition YAML (or JSON)
	// files; a folder that does not exist is an error.
	CRDDirs []string

	// ManifestDirs lists folders of other manifests (YAML or JSON files,
	// several documents each) installed after the CRDs by server-side
	// apply: the admission policies shipped with the CRDs. A folder that
	// does not exist is an error. The API server may take a moment to
	// enforce an admission policy after Start returns.
	ManifestDirs []string

	// EtcdDataDir is etcd's data folder, which must exist and is kept by
	// Stop. Empty means a temporary folder that Stop removes.
	EtcdDataDir string

	// StartTimeout bounds the start of etcd and of kube-apiserver (each);
	// StopTimeout their stop. Zero means one minute.
	StartTimeout, StopTimeout time.Duration
}

// Server is a running etcd + kube-apiserver pair. Create it with Start and
// stop it with Stop.
type Server struct {
	env *envtest.Environment

	// Config is the admin client configuration (group system:masters,
	// client-certificate authentication).
	Config *rest.Config
	// Kubeconfig is a kubeconfig for the same admin user.
	Kubeconfig []byte
	// KubectlPath is the kubectl binary of BinDir (the version of
	// kube-apiserver).
	KubectlPath string
}

// Start starts etcd and kube-apiserver and installs the CRDs of o.CRDDirs.
// On failure nothing it started keeps running.
func Start(o Options) (*Server, error) {
	startTimeout, stopTimeout := o.StartTimeout, o.StopTimeout
	if startTimeout == 0 {
		startTimeout = time.Minute
	}
	if stopTimeout == 0 {
		stopTimeout = time.Minute
	}
	for _, d := range o.ManifestDirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("manifests: %q is not a folder of manifests", d)
		}
	}
	apiServer := &envtest.APIServer{Path: filepath.Join(o.BinDir, APIServerBin)}
	// No controller-manager runs, so nobody would maintain the endpoints of
	// the "kubernetes" service, and loopback endpoints are refused anyway.
	apiServer.Configure().Set("endpoint-reconciler-type", "none")
	noExisting := false
	env := &envtest.Environment{
		ControlPlane: envtest.ControlPlane{
			APIServer:   apiServer,
			Etcd:        &envtest.Etcd{Path: filepath.Join(o.BinDir, EtcdBin), DataDir: o.EtcdDataDir},
			KubectlPath: filepath.Join(o.BinDir, KubectlBin),
		},
		CRDDirectoryPaths:        o.CRDDirs,
		ErrorIfCRDPathMissing:    true,
		UseExistingCluster:       &noExisting,
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  stopTimeout,
	}
	cfg, err := env.Start()
	if err != nil {
		// Start may fail after the processes came up (CRD install): stop them.
		_ = env.Stop()
		return nil, err
	}
	if err := applyManifests(cfg, o.ManifestDirs, startTimeout); err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Server{env: env, Config: cfg, Kubeconfig: env.KubeConfig, KubectlPath: env.ControlPlane.KubectlPath}, nil
}

// Stop stops kube-apiserver and etcd and removes their certificates and a
// temporary etcd data folder; a caller's Options.EtcdDataDir stays.
func (s *Server) Stop() error {
	return s.env.Stop()
}

// applyManifests server-side applies every object of the files of dirs, in
// file-name order.
func applyManifests(cfg *rest.Config, dirs []string, timeout time.Duration) error {
	if len(dirs) == 0 {
		return nil
	}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("manifests: client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("manifests: %q is not a folder of manifests: %w", dir, err)
		}
		for _, e := range entries {
			ext := filepath.Ext(e.Name())
			if e.IsDir() || (ext != ".yaml" && ext != ".yml" && ext != ".json") {
				continue
			}
			if err := applyFile(ctx, c, filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// applyFile server-side applies every document of one file.
func applyFile(ctx context.Context, c client.Client, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("manifests: %w", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(b)), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("manifests: decode %s: %w", path, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return fmt.Errorf("manifests: apply %s %s of %s: %w", u.GetKind(), u.GetName(), path, err)
		}
	}
}

// Package kubeapi runs a real Kubernetes API server for tests: etcd and
// kube-apiserver, built from the Go module proxy by `task setup:k8s` into
// .cache/k8s-<version>/ at the repository root, started on loopback by
// dev/kubelocal (shared with fleet dev: etcd behind mutual TLS,
// kube-apiserver through controller-runtime's envtest).
// It owns what a test harness adds: the binary folder and the skip policy,
// temporary folders, a kubeconfig file for the real kubectl binary and the
// records of orphaned processes.
//
// Invariants: a Server listens on 127.0.0.1 only, on free ports, with its
// data and certificates in temporary folders removed by Stop; Stop is
// idempotent. Its child processes are recorded under .cache/run/kubeapi/ so a
// later Start (or `task stop`) kills them if the test process died without
// stopping them.
//
// The intended use is one server per test package, started in TestMain with
// Main and reached from each test with Shared. When the binaries are missing
// it follows the testenv policy: with CI=true the package fails; otherwise
// every test that needs the server is skipped with a message naming
// `go tool -modfile=tools/go.mod task setup:k8s`.
//
// Only tests import this package (internal/hygiene checks).
package kubeapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"

	"github.com/nationtech/harmony-fleet/dev/kubelocal"
)

// Options configures Start. The zero value starts a server without CRDs.
type Options struct {
	// CRDDirs lists folders of CustomResourceDefinition YAML (or JSON) files.
	// Relative paths are relative to the working directory, which for a test
	// is its package folder. Start installs every CRD and waits until each
	// is established. A folder that does not exist is an error.
	CRDDirs []string

	// ManifestDirs lists folders of other manifests installed after the
	// CRDs by server-side apply (kubelocal.Options.ManifestDirs): the
	// admission policies of k8s/config/admission. Relative like CRDDirs; a
	// folder that does not exist is an error. A test that relies on a
	// policy polls until the API server enforces it.
	ManifestDirs []string

	// BinDir is the folder holding kube-apiserver, etcd and kubectl. Empty
	// means BinDir().
	BinDir string

	// StartTimeout bounds the start of etcd and of kube-apiserver (each).
	// Zero means one minute.
	StartTimeout time.Duration
}

// Server is a running etcd + kube-apiserver pair. Create it with Start; its
// methods are safe for concurrent use.
type Server struct {
	srv        *kubelocal.Server
	cfg        *rest.Config
	dir        string // temporary folder holding the kubeconfig
	kubeconfig string
	kubectl    string
	pidFile    string // records the child processes; see sweepOrphans

	stopOnce sync.Once
	stopErr  error
}

// Start starts etcd and kube-apiserver, installs the CRDs of opts.CRDDirs and
// the manifests of opts.ManifestDirs, and writes a kubeconfig for the admin
// user (group system:masters). When a binary is missing the error wraps
// ErrBinariesMissing. The caller must call Stop.
func Start(opts Options) (*Server, error) {
	binDir := opts.BinDir
	if binDir == "" {
		d, err := BinDir()
		if err != nil {
			return nil, err
		}
		binDir = d
	}
	if err := checkBinaries(binDir); err != nil {
		return nil, err
	}
	for _, d := range opts.CRDDirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("kubeapi: Options.CRDDirs: %q is not a folder of CRD files", d)
		}
	}
	for _, d := range opts.ManifestDirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("kubeapi: Options.ManifestDirs: %q is not a folder of manifests", d)
		}
	}
	timeout := opts.StartTimeout
	if timeout == 0 {
		timeout = time.Minute
	}

	runDir := ""
	if root, err := RepoRoot(); err == nil {
		runDir = filepath.Join(root, ".cache", "run", "kubeapi")
		sweepOrphans(runDir)
	}

	srv, err := kubelocal.Start(kubelocal.Options{
		BinDir:       binDir,
		CRDDirs:      opts.CRDDirs,
		ManifestDirs: opts.ManifestDirs,
		StartTimeout: timeout,
		StopTimeout:  time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("kubeapi: start etcd and kube-apiserver from %s: %w", binDir, err)
	}
	s := &Server{srv: srv, cfg: srv.Config, kubectl: srv.KubectlPath}
	if runDir != "" {
		s.pidFile = recordChildren(runDir)
	}

	s.dir, err = os.MkdirTemp("", "kubeapi-")
	if err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("kubeapi: kubeconfig folder: %w", err)
	}
	s.kubeconfig = filepath.Join(s.dir, "kubeconfig")
	if err := os.WriteFile(s.kubeconfig, srv.Kubeconfig, 0o600); err != nil {
		_ = s.Stop()
		return nil, fmt.Errorf("kubeapi: write kubeconfig: %w", err)
	}
	return s, nil
}

// RESTConfig returns a copy of the admin client configuration (group
// system:masters, client-certificate authentication).
func (s *Server) RESTConfig() *rest.Config {
	return rest.CopyConfig(s.cfg)
}

// KubeconfigPath returns the path of a kubeconfig file for the admin user,
// for kubectl and other tools. It is removed by Stop.
func (s *Server) KubeconfigPath() string { return s.kubeconfig }

// KubectlPath returns the path of the kubectl binary the server was started
// with (same version as kube-apiserver).
func (s *Server) KubectlPath() string { return s.kubectl }

// Kubectl runs the real kubectl binary against the server with the admin
// kubeconfig and returns its standard output. A non-zero exit is an error
// that carries kubectl's standard error. stdin, when non-nil, is passed to
// kubectl (for `apply -f -`).
func (s *Server) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, s.kubectl, append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("kubeapi: kubectl %v: %w: %s", args, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// Stop stops kube-apiserver and etcd and removes their data, certificates and
// the kubeconfig. Calling it again returns the first result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		var errs []error
		if err := s.srv.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("kubeapi: stop etcd and kube-apiserver: %w", err))
		}
		if s.dir != "" {
			if err := os.RemoveAll(s.dir); err != nil {
				errs = append(errs, fmt.Errorf("kubeapi: remove kubeconfig folder: %w", err))
			}
		}
		if s.pidFile != "" {
			_ = os.Remove(s.pidFile)
		}
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

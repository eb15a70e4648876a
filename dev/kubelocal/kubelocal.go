// Package kubelocal starts a local Kubernetes API server: etcd and
// kube-apiserver from a folder of binaries, on free loopback ports
// (kube-apiserver through controller-runtime's envtest). It owns that start
// and stop and nothing around it: etcd reachable by kube-apiserver alone
// (mutual TLS with a CA made for each start, client and peer listeners
// alike, no metrics listener), the apiserver flags a control plane without
// controller-manager needs, the installation of the caller's CRDs (created
// or updated, waited for until established) and of the manifests shipped
// with them (admission policies, server-side applied), the admin
// *rest.Config and the kubeconfig bytes.
//
// Callers keep their own policy: where the binaries are and what to say when
// they are missing, where the kubeconfig file goes, and the records of child
// processes that outlive a killed run. Errors from Start and Stop carry no
// package prefix, so each caller words them ("fleet dev: …", "kubeapi: …").
//
// It is product code, not a test harness: `fleet dev` (package dev, so
// cmd/fleet) and the API server test harness (internal/testenv/kubeapi) are
// the only packages that may import it (internal/hygiene checks).
package kubelocal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
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
	etcd      *etcd
	apiServer *envtest.APIServer
	// certDir holds the etcd certificates; dataDir etcd's data when Start
	// made a temporary one ("" otherwise).
	certDir, dataDir string
	stopTimeout      time.Duration

	// Config is the admin client configuration (group system:masters,
	// client-certificate authentication).
	Config *rest.Config
	// Kubeconfig is a kubeconfig for the same admin user.
	Kubeconfig []byte
	// KubectlPath is the kubectl binary of BinDir (the version of
	// kube-apiserver).
	KubectlPath string
	// EtcdURL is etcd's client URL (https on loopback). Only clients with
	// a certificate of the CA Start made for this run get an answer:
	// kube-apiserver's.
	EtcdURL string
	// EtcdPeerURL is etcd's peer listener (https on loopback, the same
	// client-certificate requirement).
	EtcdPeerURL string
}

// Start starts etcd and kube-apiserver and installs the CRDs of o.CRDDirs.
// On failure nothing it started keeps running.
//
// etcd listens on loopback for clients and peers with TLS and requires a
// client certificate of a CA made for this start (--client-cert-auth,
// --peer-client-cert-auth), whose files are in a folder only this user
// reads; kube-apiserver holds the one client certificate. So another local
// user gets nothing from etcd, and every read and write goes through
// kube-apiserver's authentication, RBAC and admission. Those files and a
// temporary etcd data folder are under $TMPDIR, which Stop removes; Start
// first removes the ones a run killed before its Stop left (their process
// is gone).
func Start(o Options) (_ *Server, err error) {
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
	s := &Server{stopTimeout: stopTimeout, KubectlPath: filepath.Join(o.BinDir, KubectlBin)}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	sweepStale(os.TempDir())
	// os.MkdirTemp makes the folder 0700: the keys stay this user's.
	if s.certDir, err = os.MkdirTemp("", tempName(pkiPrefix)); err != nil {
		return nil, fmt.Errorf("etcd certificates: %w", err)
	}
	pki, err := newEtcdPKI(s.certDir)
	if err != nil {
		return nil, err
	}
	dataDir := o.EtcdDataDir
	if dataDir == "" {
		if s.dataDir, err = os.MkdirTemp("", tempName(dataPrefix)); err != nil {
			return nil, fmt.Errorf("etcd data folder: %w", err)
		}
		dataDir = s.dataDir
	}
	if s.etcd, err = startEtcd(filepath.Join(o.BinDir, EtcdBin), dataDir, pki, startTimeout); err != nil {
		return nil, err
	}
	s.EtcdURL, s.EtcdPeerURL = s.etcd.URL, s.etcd.PeerURL
	etcdURL, err := url.Parse(s.etcd.URL)
	if err != nil {
		return nil, fmt.Errorf("etcd URL: %w", err)
	}
	apiServer := &envtest.APIServer{
		Path: filepath.Join(o.BinDir, APIServerBin), EtcdURL: etcdURL,
		StartTimeout: startTimeout, StopTimeout: stopTimeout,
	}
	// No controller-manager runs, so nobody would maintain the endpoints of
	// the "kubernetes" service, and loopback endpoints are refused anyway.
	apiServer.Configure().Set("endpoint-reconciler-type", "none").
		Set("etcd-cafile", pki.CAFile).Set("etcd-certfile", pki.ClientCertFile).Set("etcd-keyfile", pki.ClientKeyFile)
	if err := apiServer.Start(); err != nil {
		return nil, fmt.Errorf("start kube-apiserver: %w", err)
	}
	s.apiServer = apiServer
	plane := &envtest.ControlPlane{APIServer: apiServer}
	// A local server: clients need not be throttled.
	admin, err := plane.AddUser(envtest.User{Name: "admin", Groups: []string{"system:masters"}}, &rest.Config{QPS: 1000, Burst: 2000})
	if err != nil {
		return nil, fmt.Errorf("admin user: %w", err)
	}
	s.Config = admin.Config()
	if s.Kubeconfig, err = admin.KubeConfig(); err != nil {
		return nil, fmt.Errorf("admin kubeconfig: %w", err)
	}
	if err := waitForDefaultNamespace(s.Config, startTimeout); err != nil {
		return nil, err
	}
	if _, err := envtest.InstallCRDs(s.Config, envtest.CRDInstallOptions{Paths: o.CRDDirs, ErrorIfPathMissing: true}); err != nil {
		return nil, fmt.Errorf("install CRDs: %w", err)
	}
	if err := applyManifests(s.Config, o.ManifestDirs, startTimeout); err != nil {
		return nil, err
	}
	return s, nil
}

// The temporary folders Start makes under $TMPDIR are named by a prefix,
// the pid of the process that made them, "-" and a random part: the etcd
// certificates (with their private keys) and a temporary etcd data folder.
const (
	pkiPrefix  = "kubelocal-etcd-pki-"
	dataPrefix = "kubelocal-etcd-"
)

// tempName is the os.MkdirTemp pattern of a folder of this process.
func tempName(prefix string) string { return prefix + strconv.Itoa(os.Getpid()) + "-" }

// sweepStale removes the temporary folders of dir (this user's) whose
// process is gone: a run killed before its Stop (SIGKILL) leaves them.
// Best effort: a folder it cannot read or remove stays.
func sweepStale(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, pkiPrefix)
		if !ok {
			rest, ok = strings.CutPrefix(name, dataPrefix)
		}
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || pid <= 0 || processExists(pid) {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue
		}
		if st, isUnix := fi.Sys().(*syscall.Stat_t); !isUnix || int(st.Uid) != os.Getuid() {
			continue
		}
		_ = os.RemoveAll(filepath.Join(dir, name))
	}
}

// processExists reports whether a process pid exists (another user's
// counts).
func processExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// Stop stops kube-apiserver and etcd and removes their certificates and a
// temporary etcd data folder; a caller's Options.EtcdDataDir stays.
func (s *Server) Stop() error {
	var errs []error
	if s.apiServer != nil {
		if err := s.apiServer.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop kube-apiserver: %w", err))
		}
	}
	if s.etcd != nil {
		if err := s.etcd.stop(s.stopTimeout); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range []string{s.certDir, s.dataDir} {
		if d == "" {
			continue
		}
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// waitForDefaultNamespace waits until the API server serves the default
// namespace (on a new etcd it takes a moment to create it).
func waitForDefaultNamespace(cfg *rest.Config, timeout time.Duration) error {
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for {
		if last = c.Get(ctx, client.ObjectKey{Name: "default"}, &corev1.Namespace{}); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the default namespace did not appear within %s: %w", timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
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

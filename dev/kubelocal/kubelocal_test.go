package kubelocal_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/dev/kubelocal"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

func init() { ctrllog.SetLogger(logr.Discard()) }

// binDir returns the binary folder, applying the testenv policy when a
// binary is missing.
func binDir(t *testing.T) string {
	t.Helper()
	dir, err := kubeapi.BinDir()
	if err == nil {
		for _, b := range []string{kubelocal.APIServerBin, kubelocal.EtcdBin, kubelocal.KubectlBin} {
			if _, err = os.Stat(filepath.Join(dir, b)); err != nil {
				break
			}
		}
	}
	if err != nil {
		testenv.Missing(t, "kube-apiserver/etcd/kubectl", kubeapi.SetupCommand, err)
	}
	return dir
}

// TestStartKeepsTheCallersEtcdData starts with the product CRDs, their
// admission policies and a caller's etcd folder, checks what Start returns
// and installs, and that Stop keeps the folder.
func TestStartKeepsTheCallersEtcdData(t *testing.T) {
	bin := binDir(t)
	root, err := kubeapi.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	etcdDir := t.TempDir()
	srv, err := kubelocal.Start(kubelocal.Options{
		BinDir:       bin,
		CRDDirs:      []string{filepath.Join(root, "k8s", "config", "crd")},
		ManifestDirs: []string{filepath.Join(root, "k8s", "config", "admission")},
		EtcdDataDir:  etcdDir,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = srv.Stop()
		}
	})

	if srv.KubectlPath != filepath.Join(bin, kubelocal.KubectlBin) {
		t.Errorf("KubectlPath = %q, want kubectl of %s", srv.KubectlPath, bin)
	}
	if !bytes.Contains(srv.Kubeconfig, []byte("127.0.0.1")) {
		t.Errorf("Kubeconfig names no loopback server:\n%s", srv.Kubeconfig)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range groups.Groups {
		names = append(names, g.Name)
	}
	if !slices.Contains(names, "fleet.nationtech.io") {
		t.Errorf("API groups %v lack fleet.nationtech.io: CRDs not installed", names)
	}
	c, err := client.New(srv.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("admissionregistration.k8s.io/v1")
		u.SetKind(kind)
		if err := c.Get(context.Background(), client.ObjectKey{Name: "fleet-rollout-action-by"}, u); err != nil {
			t.Errorf("%s of k8s/config/admission not installed: %v", kind, err)
		}
	}

	stopped = true
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(etcdDir); err != nil || len(entries) == 0 {
		t.Errorf("etcd data folder after Stop: %v entries, err %v; want kept", len(entries), err)
	}
}

func TestStartFailsOnAMissingCRDFolder(t *testing.T) {
	bin := binDir(t)
	srv, err := kubelocal.Start(kubelocal.Options{BinDir: bin, CRDDirs: []string{filepath.Join(t.TempDir(), "absent")}})
	if err == nil {
		_ = srv.Stop()
		t.Fatal("Start succeeded with a missing CRD folder")
	}
}

func TestStartFailsOnAMissingManifestFolder(t *testing.T) {
	bin := binDir(t)
	srv, err := kubelocal.Start(kubelocal.Options{BinDir: bin, ManifestDirs: []string{filepath.Join(t.TempDir(), "absent")}})
	if err == nil {
		_ = srv.Stop()
		t.Fatal("Start succeeded with a missing manifest folder")
	}
}

// TestStartRemovesTheTemporaryFoldersOfAKilledRun: a run killed before
// its Stop leaves its etcd certificates (client private keys) and its
// temporary etcd data under $TMPDIR; the next Start removes the folders
// whose process is gone, and leaves a live process's and anything else.
func TestStartRemovesTheTemporaryFoldersOfAKilledRun(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	dead, live := strconv.Itoa(gone.Process.Pid), strconv.Itoa(os.Getpid())
	stale := []string{"kubelocal-etcd-pki-" + dead + "-123", "kubelocal-etcd-" + dead + "-456"}
	kept := []string{"kubelocal-etcd-pki-" + live + "-123", "kubelocal-etcd-" + live + "-456", "kubelocal-etcd-pki-789", "other-" + dead + "-1"}
	for _, d := range slices.Concat(stale, kept) {
		if err := os.Mkdir(filepath.Join(tmp, d), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, d, "client.key"), []byte("key"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// No binaries: Start fails at etcd, after its sweep, and removes its
	// own folders.
	if srv, err := kubelocal.Start(kubelocal.Options{BinDir: filepath.Join(tmp, "no-binaries")}); err == nil {
		_ = srv.Stop()
		t.Fatal("Start succeeded without binaries")
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(kept)
	if diff := cmp.Diff(kept, got); diff != "" {
		t.Errorf("$TMPDIR after Start (-want +got):\n%s", diff)
	}
}

package kubeapi

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/internal/procfs"
)

func TestVersionsMatchTheToolsModulesAndTheSetupScript(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		file string
		want string
	}{
		{"tools/k8s/go.mod", "k8s.io/kubernetes " + KubernetesVersion},
		{"tools/etcd/go.mod", "go.etcd.io/etcd/server/v3 " + EtcdVersion},
		{"scripts/setup-k8s.sh", "K8S_VERSION=" + KubernetesVersion},
		{"scripts/setup-k8s.sh", "ETCD_VERSION=" + EtcdVersion},
		{"Taskfile.yml", "k8s-" + KubernetesVersion},
	}
	for _, tt := range tests {
		data, err := os.ReadFile(filepath.Join(root, tt.file))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), tt.want) {
			t.Errorf("%s does not contain %q: keep the versions in step", tt.file, tt.want)
		}
	}
}

func TestCheckBinariesNamesEveryMissingBinary(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, kubectlBin), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Present but not executable counts as missing.
	if err := os.WriteFile(filepath.Join(dir, etcdBin), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := checkBinaries(dir)
	if !errors.Is(err, ErrBinariesMissing) {
		t.Fatalf("checkBinaries = %v, want ErrBinariesMissing", err)
	}
	for _, name := range []string{apiServerBin, etcdBin} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("error %q does not name %s", err, name)
		}
	}
	if strings.Contains(err.Error(), kubectlBin+",") || strings.HasSuffix(err.Error(), kubectlBin) {
		t.Errorf("error %q names kubectl, which is present", err)
	}
}

func TestStartWithMissingBinariesReturnsErrBinariesMissing(t *testing.T) {
	_, err := Start(Options{BinDir: t.TempDir()})
	if !errors.Is(err, ErrBinariesMissing) {
		t.Fatalf("Start = %v, want ErrBinariesMissing", err)
	}
}

func TestProcStatReadsParentAndName(t *testing.T) {
	ppid, comm, ok := procfs.Stat(os.Getpid())
	if !ok {
		t.Fatal("procStat of this process failed")
	}
	if ppid != os.Getppid() {
		t.Errorf("ppid = %d, want %d", ppid, os.Getppid())
	}
	if comm == "" {
		t.Error("empty command name")
	}
	if !procfs.Alive(os.Getpid()) {
		t.Error("procfs.Alive(self) = false")
	}
}

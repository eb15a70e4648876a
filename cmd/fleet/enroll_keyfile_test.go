package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

// enrollTarget starts a real API server with the CRDs and the development
// provider, and returns the flags that point `fleet enroll` at them.
func enrollTarget(t *testing.T) []string {
	t.Helper()
	_, _, common := startEnrollTarget(t)
	return common
}

// startEnrollTarget is enrollTarget, with the API server and the provider
// for tests that look at what enrolling did.
func startEnrollTarget(t *testing.T) (*kubeapi.Server, *devop.Provider, []string) {
	t.Helper()
	srv, err := kubeapi.Start(kubeapi.Options{CRDDirs: []string{"../../k8s/config/crd"}})
	if errors.Is(err, kubeapi.ErrBinariesMissing) {
		testenv.Missing(t, "kube-apiserver and etcd", kubeapi.SetupCommand, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	op, err := devop.New(devop.Options{AdminToken: "pat"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	tokenFile := filepath.Join(t.TempDir(), "pat")
	if err := os.WriteFile(tokenFile, []byte("pat\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, op, []string{"-kubeconfig", srv.KubeconfigPath(), "-idp-url", op.Issuer(), "-idp-token-file", tokenFile}
}

// TestTheKeyFileLandsOutsideGitWorkTreesThatWouldCommitIt: `fleet enroll`
// writes the device's private key (mode 0600) by default into the user's
// config folder (mode 0700), refuses a -key-file inside a git work tree
// that does not ignore it — naming -key-file and the fix, before anything
// is enrolled — and writes it where git ignores it, outside any work tree,
// or with -allow-in-git.
func TestTheKeyFileLandsOutsideGitWorkTreesThatWouldCommitIt(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		testenv.Missing(t, "git", "apt-get install git", err)
	}
	common := enrollTarget(t)
	tmp := t.TempDir()
	repo := filepath.Join(tmp, "repo")
	if out, err := exec.Command("git", "init", "-q", repo).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(repo, ".gitignore"), []byte("/ignored/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(tmp, "config")
	t.Setenv("XDG_CONFIG_HOME", config)

	for _, tc := range []struct {
		name, device string
		args         []string
		keyFile      string // where the key must be; "" when refused
		refusal      []string
	}{
		{"a key file in a work tree that does not ignore it is refused", "in-repo",
			[]string{"-key-file", filepath.Join(repo, "in-repo.json")}, "",
			[]string{"-key-file " + filepath.Join(repo, "in-repo.json"), "git work tree " + repo, "-allow-in-git", ".gitignore"}},
		{"a key file in a folder the work tree ignores is written", "ignored",
			[]string{"-key-file", filepath.Join(repo, "ignored", "k.json")}, filepath.Join(repo, "ignored", "k.json"), nil},
		{"a key file outside every work tree is written", "outside",
			[]string{"-key-file", filepath.Join(tmp, "outside.json")}, filepath.Join(tmp, "outside.json"), nil},
		{"-allow-in-git writes it in the work tree", "allowed",
			[]string{"-allow-in-git", "-key-file", filepath.Join(repo, "allowed.json")}, filepath.Join(repo, "allowed.json"), nil},
		{"without -key-file the key goes to the user's config folder", "default",
			nil, filepath.Join(config, "fleet", "keys", "default", "default.key.json"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := runEnroll(append(append(append([]string{}, common...), tc.args...), tc.device))
			if tc.keyFile == "" {
				if err == nil {
					t.Fatal("enrolled")
				}
				for _, want := range tc.refusal {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("the refusal %q does not say %q", err, want)
					}
				}
				if _, serr := os.Stat(tc.args[len(tc.args)-1]); !errors.Is(serr, fs.ErrNotExist) {
					t.Errorf("the refused key file exists: %v", serr)
				}
				// Nothing was enrolled: the same device enrolls after.
				if err := runEnroll(append(append([]string{}, common...), "-key-file", filepath.Join(tmp, tc.device+".json"), tc.device)); err != nil {
					t.Errorf("enrolling the refused device elsewhere: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			fi, err := os.Stat(tc.keyFile)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("key file mode %v, want 0600", fi.Mode().Perm())
			}
			if tc.args == nil {
				if di, err := os.Stat(filepath.Dir(tc.keyFile)); err != nil || di.Mode().Perm() != 0o700 {
					t.Errorf("the default key folder: %v (mode %v), want mode 0700", err, di.Mode().Perm())
				}
			}
		})
	}
}

package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// TestFleetEnrollEnrollsReenrollsAndRevokes runs `fleet enroll` against a
// real API server and the development provider's management API.
func TestFleetEnrollEnrollsReenrollsAndRevokes(t *testing.T) {
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

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "pat")
	if err := os.WriteFile(tokenFile, []byte("pat\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"-kubeconfig", srv.KubeconfigPath(), "-idp-url", op.Issuer(), "-idp-token-file", tokenFile}
	key1, key2 := filepath.Join(dir, "k1.json"), filepath.Join(dir, "k2.json")
	grant := func(path string) error {
		kf, err := credential.ReadKeyFile(path)
		if err != nil {
			t.Fatal(err)
		}
		src, err := credential.New(context.Background(), credential.Options{Issuer: op.Issuer(), Key: kf})
		if err != nil {
			t.Fatal(err)
		}
		_, err = src.Token(context.Background())
		return err
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kc, err := client.New(srv.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	device := func() v1alpha1.Device {
		var d v1alpha1.Device
		if err := kc.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: "edge-cli"}, &d); err != nil {
			t.Fatal(err)
		}
		return d
	}

	if err := runEnroll(append(common, "-key-file", key1, "edge-cli")); err != nil {
		t.Fatalf("enroll: %v", err)
	}
	kf, err := credential.ReadKeyFile(key1)
	if err != nil {
		t.Fatal(err)
	}
	if got := device().Spec.IdentitySubject; got != kf.UserID {
		t.Fatalf("identitySubject %q, want the key file's user %q", got, kf.UserID)
	}
	if err := grant(key1); err != nil {
		t.Fatalf("enrolled key: %v", err)
	}
	if err := runEnroll(append(common, "-key-file", key1, "edge-cli")); err == nil {
		t.Fatal("enrolling twice succeeded")
	}
	if err := runEnroll(append(common, "-reenroll", "-key-file", key2, "edge-cli")); err != nil {
		t.Fatalf("re-enroll: %v", err)
	}
	if err := grant(key1); !errors.Is(err, credential.ErrGrant) {
		t.Fatalf("old key after re-enrollment: %v, want ErrGrant", err)
	}
	if err := grant(key2); err != nil {
		t.Fatalf("new key: %v", err)
	}
	if err := runEnroll(append(common, "-revoke", "edge-cli")); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if err := grant(key2); !errors.Is(err, credential.ErrGrant) {
		t.Fatalf("key after revocation: %v, want ErrGrant", err)
	}
	if got := device().Labels[v1alpha1.LabelBlacklist]; got != "true" {
		t.Fatalf("blacklist label %q, want \"true\"", got)
	}
}

package buildah_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/harmony/internal/buildah"
	"github.com/nationtech/harmony-fleet/internal/testenv/podmantest"
)

// sources writes a build context with a Dockerfile from the base image.
func sources(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"Dockerfile": "FROM " + podmantest.BaseImage + "\nCOPY body.txt /body.txt\nCMD [\"cat\", \"/body.txt\"]\n",
		"body.txt":   body,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// registryDigest asks the registry which digest it serves for repo:tag.
func registryDigest(t *testing.T, reg podmantest.Registry, repo, tag string) string {
	t.Helper()
	run, err := podmantest.RunDir()
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(filepath.Join(run, "registry", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, fmt.Sprintf("https://%s/v2/%s/manifests/%s", reg.Addr, repo, tag), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(reg.Username, reg.Password)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("registry HEAD %s:%s: %s", repo, tag, resp.Status)
	}
	return resp.Header.Get("Docker-Content-Digest")
}

func TestAPushRecordsTheRegistrysDigestAndUnchangedSourcesGiveTheSameDigest(t *testing.T) {
	reg := podmantest.TestRegistry(t)
	podmantest.Connect(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	auth, err := buildah.NewAuthDir(reg.Addr, reg.Username, reg.Password)
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()
	tool := buildah.Tool{Auth: auth}
	dir := sources(t, "same body\n")
	repo := "harmony-test/buildah"
	tag := fmt.Sprintf("t-%d", time.Now().UnixNano())

	push := func(tag string) string {
		t.Helper()
		ref := reg.Addr + "/" + repo + ":" + tag
		if err := tool.Build(ctx, ref, filepath.Join(dir, "Dockerfile"), dir); err != nil {
			t.Fatal(err)
		}
		digest, err := tool.Push(ctx, ref)
		if err != nil {
			t.Fatal(err)
		}
		if err := tool.Remove(ctx, ref); err != nil {
			t.Fatal(err)
		}
		return digest
	}
	first := push(tag)
	if got := registryDigest(t, reg, repo, tag); got != first {
		t.Errorf("buildah recorded %s, the registry serves %s", first, got)
	}
	// A later run of the same commit (files touched by a fresh checkout).
	if err := os.Chtimes(filepath.Join(dir, "body.txt"), time.Now(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if again := push(tag + "-again"); again != first {
		t.Errorf("rebuilding unchanged sources gave digest %s, first %s", again, first)
	}
	if err := os.WriteFile(filepath.Join(dir, "body.txt"), []byte("another body\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed := push(tag + "-changed"); changed == first {
		t.Errorf("changed sources kept digest %s", changed)
	}
}

func TestAWrongPasswordFailsThePushWithoutQuotingIt(t *testing.T) {
	reg := podmantest.TestRegistry(t)
	podmantest.Connect(t)
	const wrong = "not-the-password-0451"
	auth, err := buildah.NewAuthDir(reg.Addr, reg.Username, wrong)
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()
	tool := buildah.Tool{Auth: auth}
	dir := sources(t, "denied\n")
	ref := reg.Addr + "/harmony-test/denied:t1"
	if err := tool.Build(t.Context(), ref, filepath.Join(dir, "Dockerfile"), dir); err != nil {
		t.Fatal(err)
	}
	defer tool.Remove(context.Background(), ref)
	_, err = tool.Push(t.Context(), ref)
	if !errors.Is(err, buildah.ErrPush) {
		t.Fatalf("got %v, want ErrPush", err)
	}
	if strings.Contains(err.Error(), wrong) {
		t.Fatalf("the error quotes the password: %v", err)
	}
}

func TestTheAuthDirectoryIsPrivateAndRemovedOnClose(t *testing.T) {
	auth, err := buildah.NewAuthDir("reg.example:5000", "robot", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{auth.Dir(): 0o700, auth.File(): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
	if err := auth.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(auth.File()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("auth file still there after Close: %v", err)
	}
	if err := auth.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// buildah runs with only what it needs of the environment: never the CI
// secret, tokens, kubeconfigs or the user's registry configuration.
func TestBuildahGetsNoneOfTheCredentialsInTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	dump := filepath.Join(dir, "env")
	fake := filepath.Join(dir, "buildah")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nenv > '"+dump+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	hostile := map[string]string{
		"HARMONY_ZITADEL_KEY_JSON": `{"type":"serviceaccount","keyId":"k","key":"-----BEGIN RSA PRIVATE KEY-----","userId":"u"}`,
		"DOCKER_CONFIG":            "/home/ci/.docker",
		"REGISTRY_AUTH_FILE":       "/home/ci/auth.json",
		"KUBECONFIG":               "/home/ci/.kube/config",
		"VAULT_TOKEN":              "hvs.bogus",
		"BAO_TOKEN":                "s.bogus",
		"AWS_SECRET_ACCESS_KEY":    "bogus",
		"SOURCE_DATE_EPOCH":        "1700000000",
	}
	for k, v := range hostile {
		t.Setenv(k, v)
	}
	kept := map[string]string{"HOME": t.TempDir(), "TMPDIR": t.TempDir(), "CONTAINERS_STORAGE_CONF": "/etc/containers/storage.conf",
		"BUILDAH_ISOLATION": "chroot", "HTTPS_PROXY": "http://proxy.example:3128"}
	for k, v := range kept {
		t.Setenv(k, v)
	}
	auth, err := buildah.NewAuthDir("reg.example:5000", "robot", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer auth.Close()
	if err := (buildah.Tool{Path: fake, Auth: auth}).Build(t.Context(), "reg.example:5000/app/web:t1", "Dockerfile", dir); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dump)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	for k := range hostile {
		if k == "REGISTRY_AUTH_FILE" {
			continue
		}
		if _, ok := got[k]; ok {
			t.Errorf("buildah got %s", k)
		}
	}
	kept["REGISTRY_AUTH_FILE"] = auth.File()
	kept["PATH"] = os.Getenv("PATH")
	for k, v := range kept {
		if got[k] != v {
			t.Errorf("buildah got %s=%q, want %q", k, got[k], v)
		}
	}
}

package podmantest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// ErrRegistryFile reports that the registry credentials file is incomplete.
var ErrRegistryFile = errors.New("podmantest: registry credentials file is incomplete")

// Registry is the TLS distribution registry `task setup:podman` runs for
// tests, with htpasswd authentication. Its CA is trusted by Podman and
// buildah through /etc/containers/certs.d/<Addr>/ca.crt.
type Registry struct {
	// Addr is the registry authority, host:port ("127.0.0.1:5000").
	Addr string
	// Username and Password are the test credentials, generated once per
	// machine into .cache/run/registry.env (never committed).
	Username string
	Password string
	// CAFile is the registry's CA certificate (set by TestRegistry).
	CAFile string
}

// String names the registry and the user, never the password.
func (r Registry) String() string {
	return fmt.Sprintf("%s (user %s)", r.Addr, r.Username)
}

// GoString keeps the password out of %#v too.
func (r Registry) GoString() string {
	return fmt.Sprintf("podmantest.Registry{Addr: %q, Username: %q, Password: <redacted>}", r.Addr, r.Username)
}

// TestRegistry returns the test registry after checking that it answers over
// TLS with the CA setup made. A missing credentials file or a registry that
// does not answer applies the testenv policy (fail in CI, skip elsewhere).
func TestRegistry(tb testing.TB) Registry {
	tb.Helper()
	run, err := RunDir()
	if err != nil {
		tb.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(run, "registry.env"))
	if err != nil {
		testenv.Missing(tb, "test registry", SetupCommand, fmt.Errorf("podmantest: registry credentials: %w", err))
	}
	reg, err := parseRegistryEnv(data)
	if err != nil {
		tb.Fatalf("%v: re-run `%s`", err, SetupCommand)
	}
	reg.CAFile = filepath.Join(run, "registry", "ca.crt")
	if err := ping(tb.Context(), reg, reg.CAFile); err != nil {
		testenv.Missing(tb, "test registry", SetupCommand, err)
	}
	return reg
}

// parseRegistryEnv reads the KEY=value lines scripts/setup-podman.sh writes.
func parseRegistryEnv(data []byte) (Registry, error) {
	var r Registry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, value, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		switch key {
		case "FLEET_TEST_REGISTRY":
			r.Addr = value
		case "FLEET_TEST_REGISTRY_USER":
			r.Username = value
		case "FLEET_TEST_REGISTRY_PASSWORD":
			r.Password = value
		}
	}
	if r.Addr == "" || r.Username == "" || r.Password == "" {
		return Registry{}, fmt.Errorf("%w: want FLEET_TEST_REGISTRY, FLEET_TEST_REGISTRY_USER and FLEET_TEST_REGISTRY_PASSWORD", ErrRegistryFile)
	}
	return r, nil
}

// ping checks that the registry answers /v2/ over TLS with a certificate
// from caFile, and asks for authentication.
func ping(ctx context.Context, reg Registry, caFile string) error {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return fmt.Errorf("podmantest: registry CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("podmantest: registry CA %s holds no certificate", caFile)
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+reg.Addr+"/v2/", nil)
	if err != nil {
		return fmt.Errorf("podmantest: registry request: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("podmantest: registry %s: %w", reg.Addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return fmt.Errorf("podmantest: registry %s answered /v2/ with %s, want 401 (authentication on)", reg.Addr, resp.Status)
	}
	return nil
}

// PushImage builds an image with buildah from containerfile (the text of a
// Containerfile, normally FROM BaseImage), pushes it to reg as
// <Addr>/<repo>:<random tag> with reg's credentials and --digestfile, removes
// the local copy so that a later pull has to fetch it from the registry, and
// returns the pushed image's reference by digest, <Addr>/<repo>@sha256:….
//
// The credentials reach buildah through a temporary auth file, never its
// command line. A missing buildah applies the testenv policy.
func PushImage(tb testing.TB, reg Registry, repo, containerfile string) string {
	tb.Helper()
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	return PushImageAs(tb, reg, fmt.Sprintf("%s/%s:t-%s", reg.Addr, repo, hex.EncodeToString(suffix)), containerfile)
}

// PushImageAs is PushImage under the reference ref (<Addr>/<repo>:<tag>)
// the caller chooses: pushing another image under a tag already pushed
// moves the tag. It returns the pushed image's reference by digest.
func PushImageAs(tb testing.TB, reg Registry, ref, containerfile string) string {
	tb.Helper()
	return PushImageTo(tb, reg, []string{ref}, containerfile)[0]
}

// PushImageTo builds containerfile once and pushes the one image under
// every reference of refs (<Addr>/<repo>:<tag>), as a mirror holds an
// image under another repository. It returns each pushed reference by
// digest, in refs' order.
func PushImageTo(tb testing.TB, reg Registry, refs []string, containerfile string) []string {
	tb.Helper()
	if len(refs) == 0 {
		tb.Fatal("podmantest: PushImageTo needs at least one reference")
	}
	ref := refs[0]
	buildah, err := exec.LookPath("buildah")
	if err != nil {
		testenv.Missing(tb, "buildah", SetupCommand, err)
	}
	dir := tb.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Containerfile"), []byte(containerfile), 0o644); err != nil {
		tb.Fatal(err)
	}
	auth, err := json.Marshal(map[string]any{"auths": map[string]any{
		reg.Addr: map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(reg.Username + ":" + reg.Password))},
	}})
	if err != nil {
		tb.Fatal(err)
	}
	authFile := filepath.Join(dir, "auth.json")
	if err := os.WriteFile(authFile, auth, 0o600); err != nil {
		tb.Fatal(err)
	}
	digestFile := filepath.Join(dir, "digest")

	run := func(args ...string) {
		tb.Helper()
		ctx, cancel := context.WithTimeout(tb.Context(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, buildah, args...).CombinedOutput()
		if err != nil {
			tb.Fatalf("buildah %s: %v\n%s", args[0], err, out)
		}
	}
	run("bud", "--quiet", "--pull=never", "--tag", ref, "--file", filepath.Join(dir, "Containerfile"), dir)
	out := make([]string, len(refs))
	for i, r := range refs {
		if i > 0 {
			run("tag", ref, r)
		}
		run("push", "--quiet", "--retry", "0", "--authfile", authFile, "--digestfile", digestFile, r)
		digest, err := os.ReadFile(digestFile)
		if err != nil {
			tb.Fatalf("buildah push wrote no digest file: %v", err)
		}
		d := strings.TrimSpace(string(digest))
		if !strings.HasPrefix(d, "sha256:") || len(d) != len("sha256:")+64 {
			tb.Fatalf("buildah push digest %q is not a sha256 digest", d)
		}
		repo, _, _ := strings.Cut(strings.TrimPrefix(r, reg.Addr+"/"), ":")
		out[i] = fmt.Sprintf("%s/%s@%s", reg.Addr, repo, d)
	}
	for _, r := range refs {
		run("rmi", r)
	}
	return out
}

package podmantest

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"
)

// Manifest is a raw manifest as the registry serves it.
type Manifest struct {
	Body        []byte
	ContentType string
}

// registryClient is an HTTP client that trusts reg's CA.
func registryClient(tb testing.TB, reg Registry) *http.Client {
	tb.Helper()
	ca, err := os.ReadFile(reg.CAFile)
	if err != nil {
		tb.Fatalf("podmantest: registry CA (a Registry from TestRegistry has it): %v", err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// GetManifest reads the OCI manifest of <repo>:<tag> from reg, as a
// registry user (or an attacker holding the push credential) can.
func GetManifest(tb testing.TB, reg Registry, repo, tag string) Manifest {
	tb.Helper()
	req, err := http.NewRequestWithContext(tb.Context(), http.MethodGet, fmt.Sprintf("https://%s/v2/%s/manifests/%s", reg.Addr, repo, tag), nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.SetBasicAuth(reg.Username, reg.Password)
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := registryClient(tb, reg).Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("get the manifest %s:%s: %s", repo, tag, resp.Status)
	}
	return Manifest{Body: b, ContentType: resp.Header.Get("Content-Type")}
}

// PutManifest makes reg serve m as <repo>:<tag> (its blobs must be in
// repo already), as a registry user (or an attacker holding the push
// credential) can.
func PutManifest(tb testing.TB, reg Registry, repo, tag string, m Manifest) {
	tb.Helper()
	req, err := http.NewRequestWithContext(tb.Context(), http.MethodPut, fmt.Sprintf("https://%s/v2/%s/manifests/%s", reg.Addr, repo, tag), bytes.NewReader(m.Body))
	if err != nil {
		tb.Fatal(err)
	}
	req.SetBasicAuth(reg.Username, reg.Password)
	req.Header.Set("Content-Type", m.ContentType)
	resp, err := registryClient(tb, reg).Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusCreated {
		tb.Fatalf("put the manifest %s:%s: %s %s", repo, tag, resp.Status, b)
	}
}

// SignatureTag is the tag of the sigstore attachment (cosign layout) that
// holds the signatures of the image of digest ("sha256:…").
func SignatureTag(digest string) string {
	return "sha256-" + digest[len("sha256:"):] + ".sig"
}

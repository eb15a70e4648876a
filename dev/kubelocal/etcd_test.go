package kubelocal_test

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/dev/kubelocal"
	"github.com/nationtech/harmony-fleet/internal/procfs"
)

// probeEnv, when set, makes the test binary a probe (probeMain) instead of
// running tests: the value is a JSON list of probe requests.
const probeEnv = "KUBELOCAL_TEST_PROBE"

// nobody is the uid and gid the probe runs as when the tests run as root: a
// real other local user.
const nobody = 65534

func TestMain(m *testing.M) {
	if spec := os.Getenv(probeEnv); spec != "" {
		probeMain(spec)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// probe is one request a client without any certificate makes.
type probe struct {
	// Addr is the listener; TLS whether the request uses TLS (accepting
	// any server certificate, presenting none).
	Addr netip.AddrPort
	TLS  bool
	// Method and Path: POST /v3/kv/range reads every key through etcd's
	// HTTP gateway; GET /members answers on etcd's peer listener.
	Method, Path string
}

// probeResult is what the probe got: an HTTP status, or the error.
type probeResult struct {
	Status int
	Err    string
}

// probeMain runs the probes of spec and prints their results as JSON.
func probeMain(spec string) {
	var probes []probe
	if err := json.Unmarshal([]byte(spec), &probes); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the probe is the unauthenticated stranger
	}}
	out := make([]probeResult, len(probes))
	for i, p := range probes {
		scheme := "http"
		if p.TLS {
			scheme = "https"
		}
		var body io.Reader
		if p.Method == http.MethodPost {
			body = strings.NewReader(`{"key":"AA==","range_end":"AA=="}`)
		}
		req, err := http.NewRequest(p.Method, scheme+"://"+p.Addr.String()+p.Path, body)
		if err == nil {
			var resp *http.Response
			if resp, err = hc.Do(req); err == nil {
				_ = resp.Body.Close()
				out[i].Status = resp.StatusCode
			}
		}
		if err != nil {
			out[i].Err = err.Error()
		}
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
}

// runProbes runs probes in a copy of the test binary as another local user
// (uid 65534 when the tests run as root; else this user, who has no
// certificate either).
func runProbes(t *testing.T, probes []probe) []probeResult {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The go test binary sits in a folder only its user may enter: copy it
	// where the other user can run it.
	// (t.TempDir's parent is closed to other users).
	dir, err := os.MkdirTemp("", "kubelocal-probe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "probe")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	spec, err := json.Marshal(probes)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Dir = dir
	cmd.Env = []string{probeEnv + "=" + string(spec), "PATH=/usr/bin:/bin"}
	if os.Getuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	} else {
		t.Logf("not root: the probe runs as this user (uid %d), without a certificate", os.Getuid())
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v: %s", err, stderr.String())
	}
	var res []probeResult
	if err := json.Unmarshal(out, &res); err != nil || len(res) != len(probes) {
		t.Fatalf("probe output %q: %v", out, err)
	}
	return res
}

// etcdListeners returns the TCP addresses the etcd children of this
// process listen on.
func etcdListeners(t *testing.T) []netip.AddrPort {
	t.Helper()
	var out []netip.AddrPort
	for _, pid := range procfs.Children(os.Getpid()) {
		if _, comm, ok := procfs.Stat(pid); !ok || comm != kubelocal.EtcdBin {
			continue
		}
		addrs, err := procfs.ListeningTCP(pid)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, addrs...)
	}
	return out
}

// TestEtcdAnswersNoOtherLocalUser starts the server fleet dev and the test
// harness start, finds every TCP listener of its etcd process, and has
// another local user (uid 65534) try each without a client certificate:
// plain HTTP and TLS, reading every key through the v3 HTTP gateway and
// listing the members on the peer API. Not one request gets an answer; the
// same user gets one from a plain server (the probe works), and the API
// server, etcd's one client, still serves.
func TestEtcdAnswersNoOtherLocalUser(t *testing.T) {
	bin := binDir(t)
	srv, err := kubelocal.Start(kubelocal.Options{BinDir: bin})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })

	listeners := etcdListeners(t)
	if len(listeners) < 2 {
		t.Fatalf("etcd listens on %v: want its client and peer listeners", listeners)
	}
	control := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(control.Close)
	controlAddr := netip.MustParseAddrPort(strings.TrimPrefix(control.URL, "http://"))

	probes := []probe{{Addr: controlAddr, Method: http.MethodGet, Path: "/"}}
	for _, a := range listeners {
		if !a.Addr().IsLoopback() {
			t.Errorf("etcd listens on %v: want loopback only", a)
		}
		for _, tlsOn := range []bool{false, true} {
			probes = append(probes,
				probe{Addr: a, TLS: tlsOn, Method: http.MethodPost, Path: "/v3/kv/range"},
				probe{Addr: a, TLS: tlsOn, Method: http.MethodGet, Path: "/members"})
		}
	}
	results := runProbes(t, probes)
	if diff := cmp.Diff(probeResult{Status: http.StatusOK}, results[0]); diff != "" {
		t.Fatalf("the other user's request to a plain loopback server (-want +got):\n%s", diff)
	}
	for i, p := range probes[1:] {
		r := results[i+1]
		switch {
		case p.TLS && r.Err == "":
			t.Errorf("%s https://%s%s without a client certificate: TLS handshake passed, answered %d; want it refused", p.Method, p.Addr, p.Path, r.Status)
		case !p.TLS && r.Err == "" && r.Status < 400:
			t.Errorf("%s http://%s%s without TLS: answered %d; want no answer", p.Method, p.Addr, p.Path, r.Status)
		}
	}

	c, err := client.New(srv.Config, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Get(t.Context(), client.ObjectKey{Name: "default"}, &corev1.Namespace{}); err != nil {
		t.Errorf("kube-apiserver, etcd's client, cannot read: %v", err)
	}
}

// TestEtcdGetsNewPortsWhenAnotherProcessTookOne: the port etcd is given
// was free when found and is taken before etcd listens (another test
// process found it free too); etcd exits at once, and Start tries again
// with new ports.
func TestEtcdGetsNewPortsWhenAnotherProcessTookOne(t *testing.T) {
	bin := binDir(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	calls := 0
	t.Cleanup(kubelocal.SetPickPort(func() (int, error) {
		calls++
		if calls == 1 {
			return takenPort, nil
		}
		return kubelocal.FreePort()
	}))
	url, stop, err := kubelocal.StartEtcd(filepath.Join(bin, kubelocal.EtcdBin), t.TempDir(), t.TempDir(), time.Minute)
	if err != nil {
		t.Fatalf("etcd with its first client port taken: %v", err)
	}
	defer func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	if calls != 4 {
		t.Errorf("%d ports picked, want 4: two for the attempt that found its client port taken, two for the next", calls)
	}
	if strings.HasSuffix(url, fmt.Sprintf(":%d", takenPort)) {
		t.Errorf("etcd answers on the taken port: %s", url)
	}
}

package kubelocal

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// etcd is a running etcd whose client and peer listeners, both on
// loopback, take only TLS connections with a client certificate of its own
// CA (etcdPKI): no other local user reaches its data past kube-apiserver.
// It listens on nothing else (no metrics listener).
type etcd struct {
	cmd *exec.Cmd
	// URL is the client URL (https://127.0.0.1:<port>); PeerURL the peer
	// listener's.
	URL, PeerURL string
	// done is closed when the process has exited.
	done chan struct{}
	// out keeps the end of its output for error messages.
	out *tailBuffer
}

// portAttempts is how many times startEtcd picks new ports when another
// process took one between freePort and etcd's listen.
const portAttempts = 3

// startEtcd starts etcd from bin with its data in dataDir and waits, up to
// timeout, until it answers /health over mutual TLS. A port taken by
// another process in the moment between finding it free and etcd's listen
// (etcd exits before it wrote any data) is tried again with new ports.
func startEtcd(bin, dataDir string, pki *etcdPKI, timeout time.Duration) (*etcd, error) {
	for attempt := 1; ; attempt++ {
		e, err := startEtcdOnce(bin, dataDir, pki, timeout)
		if err == nil || attempt == portAttempts || !errors.Is(err, errPortTaken) {
			return e, err
		}
	}
}

// errPortTaken is etcd exiting because a port it was given is in use.
var errPortTaken = errors.New("a port was taken")

func startEtcdOnce(bin, dataDir string, pki *etcdPKI, timeout time.Duration) (*etcd, error) {
	clientPort, err := pickPort()
	if err != nil {
		return nil, err
	}
	peerPort, err := pickPort()
	if err != nil {
		return nil, err
	}
	e := &etcd{
		URL:     "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(clientPort)),
		PeerURL: "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(peerPort)),
		done:    make(chan struct{}), out: &tailBuffer{max: 8 << 10},
	}
	e.cmd = exec.Command(bin,
		"--data-dir="+dataDir,
		"--listen-client-urls="+e.URL, "--advertise-client-urls="+e.URL,
		"--client-cert-auth", "--trusted-ca-file="+pki.CAFile, "--cert-file="+pki.CertFile, "--key-file="+pki.KeyFile,
		"--listen-peer-urls="+e.PeerURL,
		"--peer-client-cert-auth", "--peer-trusted-ca-file="+pki.CAFile, "--peer-cert-file="+pki.CertFile, "--peer-key-file="+pki.KeyFile,
		// As envtest started it: a crash loses the last writes, which a
		// local development or test server can afford.
		"--unsafe-no-fsync",
	)
	e.cmd.Stdout, e.cmd.Stderr = e.out, e.out
	// Its own process group, as envtest does: a terminal's Ctrl-C reaches
	// the caller, which stops etcd after kube-apiserver.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	go func() {
		_ = e.cmd.Wait()
		close(e.done)
	}()
	hc, err := pki.client()
	if err != nil {
		_ = e.stop(time.Minute)
		return nil, err
	}
	defer hc.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = e.healthy(ctx, hc); last == nil {
			return e, nil
		}
		select {
		case <-e.done:
			out := e.out.String()
			if strings.Contains(out, "address already in use") {
				return nil, fmt.Errorf("etcd exited before it answered (%v): %w: %s", e.cmd.ProcessState, errPortTaken, out)
			}
			return nil, fmt.Errorf("etcd exited before it answered (%v): %s", e.cmd.ProcessState, out)
		case <-ctx.Done():
			_ = e.stop(time.Minute)
			return nil, fmt.Errorf("etcd did not answer /health within %s (%v): %s", timeout, last, e.out.String())
		case <-tick.C:
		}
	}
}

// healthy asks etcd's /health with kube-apiserver's client certificate.
func (e *etcd) healthy(ctx context.Context, hc *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/health: %s", resp.Status)
	}
	return nil
}

// stop ends etcd: SIGTERM, then SIGKILL after timeout.
func (e *etcd) stop(timeout time.Duration) error {
	select {
	case <-e.done:
		return nil
	default:
	}
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop etcd: %w", err)
	}
	select {
	case <-e.done:
		return nil
	case <-time.After(timeout):
		_ = e.cmd.Process.Kill()
		<-e.done
		return fmt.Errorf("etcd did not stop within %s: killed", timeout)
	}
}

// client is an HTTPS client holding kube-apiserver's client certificate
// and trusting only the etcd CA.
func (p *etcdPKI) client() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(p.ClientCertFile, p.ClientKeyFile)
	if err != nil {
		return nil, fmt.Errorf("etcd client certificate: %w", err)
	}
	caPEM, err := os.ReadFile(p.CAFile)
	if err != nil {
		return nil, fmt.Errorf("etcd CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("etcd CA: no certificate")
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12},
	}}, nil
}

// pickPort is freePort; a test takes the port it returns first.
var pickPort = freePort

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/testenv"
)

func TestServeWebRefusesBadFlagsNamingTheFix(t *testing.T) {
	short := filepath.Join(t.TempDir(), "short.key")
	secret := filepath.Join(t.TempDir(), "secret")
	if os.WriteFile(short, []byte("too-short"), 0o600) != nil || os.WriteFile(secret, []byte("  \n"), 0o600) != nil {
		t.Fatal("cannot write the test files")
	}
	good := filepath.Join(t.TempDir(), "good.key")
	if os.WriteFile(good, bytes.Repeat([]byte{7}, 32), 0o600) != nil {
		t.Fatal("cannot write the key file")
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no session key outside --mock is refused", []string{"--oidc-issuer", "https://idp.example.com", "--oidc-client-id", "d"}, "--session-key-file"},
		{"a session key of the wrong size is refused without quoting it", []string{"--session-key-file", short}, "32 random bytes"},
		{"no OIDC issuer outside --mock is refused", []string{"--session-key-file", good}, "--oidc-issuer"},
		{"an empty client secret file is refused", []string{"--session-key-file", good, "--oidc-issuer", "https://idp.example.com", "--oidc-client-id", "d",
			"--oidc-client-secret-file", secret, "--listen", "127.0.0.1:0"}, "is empty"},
		{"no public URL outside --mock is refused", []string{"--session-key-file", good, "--oidc-issuer", "https://idp.example.com", "--oidc-client-id", "d",
			"--listen", "127.0.0.1:0"}, "--public-url"},
		{"plain http on a public host is refused", []string{"--mock", "--listen", "127.0.0.1:0", "--public-url", "http://fleet.example.com"}, "not loopback"},
		{"--mock with an OIDC issuer is refused", []string{"--mock", "--oidc-issuer", "https://idp.example.com"}, "drop --oidc-issuer"},
		{"an unknown log format is refused", []string{"--mock", "--log-format", "xml"}, "--log-format"},
		{"metrics with --mock are refused", []string{"--mock", "--metrics-addr", "127.0.0.1:0"}, "--metrics-addr: --mock reads no device logs"},
		{"a NATS key file together with NATS credentials is refused", []string{"--session-key-file", good, "--oidc-issuer", "https://idp.example.com", "--oidc-client-id", "d",
			"--public-url", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--nats-key-file", good, "--nats-creds", good}, "give one NATS identity"},
		{"a NATS key file that is no machine key is refused naming the flag", []string{"--session-key-file", good, "--oidc-issuer", "https://idp.example.com", "--oidc-client-id", "d",
			"--public-url", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--nats-key-file", secret}, "--nats-key-file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), append([]string{"serve-web"}, tc.args...), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %q", err, tc.want)
			}
			if err != nil && strings.Contains(err.Error(), "too-short") {
				t.Errorf("the error quotes the key file's content: %v", err)
			}
		})
	}
}

func TestServeWebMockServesMockDataAndStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve-web", "--mock", "--listen", "127.0.0.1:0", "--log-format", "text"}, pw)
		pw.Close()
	}()
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(sc.Text(), "fleet-operator serve-web --mock: mock data at "); ok {
				urls <- strings.Fields(u)[0]
			}
		}
	}()
	var base string
	select {
	case base = <-urls:
	case err := <-done:
		t.Fatalf("serve-web --mock stopped: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("serve-web --mock printed no URL within a minute")
	}
	var body string
	testenv.Eventually(t, "the mock sign-in page", time.Minute, func() bool {
		resp, err := http.Get(base + "/login")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		return resp.StatusCode == http.StatusOK
	})
	if !strings.Contains(body, "Mock data.") || !strings.Contains(body, "mock sign-in") {
		t.Errorf("the sign-in page of --mock says neither that the data nor that the sign-in is mock:\n%s", body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve-web --mock after its context ended: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("serve-web --mock did not stop within a minute of its context ending")
	}
}

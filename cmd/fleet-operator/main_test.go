package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard()) // the tests' clients log nothing
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../../k8s/config/crd"}})
}

func TestTheBinaryRunsTheOperatorFromFlags(t *testing.T) {
	srv := kubeapi.Shared(t)
	nsrv := natstest.Start(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	var logs testenv.SyncBuffer
	go func() {
		done <- run(runCtx, []string{"--kubeconfig", srv.KubeconfigPath(), "--nats-url", nsrv.ClientURL(), "--log-format", "text",
			"--leader-election-namespace", "default"}, &logs)
	}()

	if out, err := srv.Kubectl(ctx, nil, "create", "namespace", "lab"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if out, err := srv.Kubectl(ctx, nil, "apply", "-n", "lab", "-f", "../../examples/analysis-api.yaml"); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	st, err := events.NewStore(natstest.Connect(t, nsrv), events.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The binary provisioned the streams and appended the revision; the
	// example sets allowedGroups and no group file is given: zero targets.
	var rec events.Record
	if testenv.Poll(context.Background(), 60*time.Second, func() bool {
		rec, err = st.Last(ctx, "fleet.intent.deployment.lab.analysis-api")
		return err == nil
	}) != nil {
		t.Fatalf("no revision event: %v\nlogs:\n%s", err, logs.String())
	}
	d, err := events.Decode[events.DeploymentRevisionCreated](rec.Event)
	if err != nil || d.Generation != 1 || len(d.Targets) != 0 {
		t.Fatalf("revision %+v, %v", d, err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("run returned %v", err)
	}
	if !strings.Contains(logs.String(), "operator starting") {
		t.Errorf("logs lack the start record:\n%s", logs.String())
	}
}

func TestBadFlagsAreRefused(t *testing.T) {
	srv := kubeapi.Shared(t)
	kc := []string{"--kubeconfig", srv.KubeconfigPath()}
	t.Setenv("POD_NAMESPACE", "") // the Lease namespace's default
	empty := filepath.Join(t.TempDir(), "empty-token")
	token := filepath.Join(t.TempDir(), "token")
	if os.WriteFile(empty, nil, 0o600) != nil || os.WriteFile(token, []byte("s.admin\n"), 0o600) != nil {
		t.Fatal("cannot write the token files")
	}
	key := operatorKeyFile(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"an unknown log format is refused", []string{"--log-format", "xml"}, "--log-format"},
		{"leader election outside a cluster without a Lease namespace is refused", kc, "--leader-election-namespace"},
		{"a lease duration not longer than the renew deadline is refused", append(kc, "--leader-election-namespace", "default",
			"--leader-election-lease-duration", "10s"), "renew deadline"},
		{"a lease duration in fractions of a second is refused", append(kc, "--leader-election-namespace", "default",
			"--leader-election-lease-duration", "15500ms"), "whole seconds"},
		{"a renew deadline within 1.2 retry periods is refused", append(kc, "--leader-election-namespace", "default",
			"--leader-election-retry-period", "9s"), "retry period"},
		{"OpenBao without a token file is refused", append(kc, "--openbao-url", "http://127.0.0.1:8200"), "--openbao-token-file"},
		{"a token file without OpenBao is refused", append(kc, "--openbao-token-file", empty), "--openbao-url"},
		{"an empty token file is refused", append(kc, "--openbao-url", "http://127.0.0.1:8200", "--openbao-token-file", empty), "is empty"},
		{"a NATS key file and a credentials file together are refused", append(kc, "--leader-election-namespace", "default",
			"--nats-key-file", key, "--nats-creds", token), "--nats-creds"},
		{"a missing NATS key file is named", append(kc, "--leader-election-namespace", "default", "--nats-key-file", "no-such-key.json"), "no-such-key.json"},
		{"a NATS key file without an issuer asks for --oidc-issuer", append(kc, "--leader-election-namespace", "default",
			"--nats-key-file", key), "--oidc-issuer"},
		{"no Device workers are refused", append(kc, "--device-workers", "0"), "--device-workers"},
		{"a negative progress deadline is refused", append(kc, "--progress-deadline", "-1m"), "--progress-deadline"},
		{"a client-side rate of zero is refused", append(kc, "--kube-api-qps", "0"), "--kube-api-qps"},
		{"a client-side rate without a burst is refused", append(kc, "--kube-api-qps", "50", "--kube-api-burst", "0"), "--kube-api-burst"},
		{"a missing CA file is named", append(kc, "--openbao-url", "https://127.0.0.1:8200", "--openbao-token-file", token, "--openbao-ca-file", "no-such-ca.pem"), "no-such-ca.pem"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := run(context.Background(), tc.args, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %q", err, tc.want)
			}
		})
	}
}

// operatorKeyFile writes a machine key file (a Zitadel JSON key, no issuer)
// and returns its path.
func operatorKeyFile(t *testing.T) string {
	t.Helper()
	rk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pemKey := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rk)})
	p := filepath.Join(t.TempDir(), "operator-key.json")
	if err := credential.WriteKeyFile(p, credential.KeyFile{Type: "serviceaccount", KeyID: "k1", Key: string(pemKey), UserID: "operator"}); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestTheKubernetesClientRateLimitIsTheFlags(t *testing.T) {
	srv := kubeapi.Shared(t)
	tests := []struct {
		name      string
		qps       float64
		burst     int
		wantQPS   float32
		wantBurst int
	}{
		{"the default has no client-side limit, even from a kubeconfig file", -1, 100, -1, 100},
		{"a positive rate and burst are the client's", 50, 75, 50, 75},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := limitedKubeConfig(srv.KubeconfigPath(), tc.qps, tc.burst)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.QPS != tc.wantQPS || cfg.Burst != tc.wantBurst {
				t.Errorf("QPS %g, burst %d; want %g, %d", cfg.QPS, cfg.Burst, tc.wantQPS, tc.wantBurst)
			}
		})
	}
}

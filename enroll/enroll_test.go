package enroll_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/nationtech/harmony-fleet/enroll"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/identity/zitadel"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

var _ enroll.Provider = (*devop.Provider)(nil)

func TestMain(m *testing.M) {
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../k8s/config/crd"}})
}

type fixture struct {
	op   *devop.Provider
	c    client.Client
	en   *enroll.Enroller
	ns   string
	logs *bytes.Buffer
	dir  string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	srv := kubeapi.Shared(t)
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(srv.RESTConfig(), client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	op, err := devop.New(devop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	ns := strings.ToLower(strings.NewReplacer("_", "-", "/", "-").Replace(t.Name()))
	if len(ns) > 50 {
		ns = ns[:50]
	}
	ns = strings.Trim(ns, "-")
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	en, err := enroll.New(enroll.Options{Client: c, Provider: op, Namespace: ns, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
		Issuer: op.Issuer(), Audience: op.Audience()})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{op: op, c: c, en: en, ns: ns, logs: logs, dir: t.TempDir()}
}

func (f *fixture) device(t *testing.T, name string) *v1alpha1.Device {
	t.Helper()
	var d v1alpha1.Device
	if err := f.c.Get(context.Background(), types.NamespacedName{Namespace: f.ns, Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// grant performs the JWT-profile grant with a key file.
func (f *fixture) grant(t *testing.T, path string) error {
	t.Helper()
	kf, err := credential.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if kf.Issuer != f.op.Issuer() || kf.Audience != f.op.Audience() {
		t.Errorf("the key file names issuer %q and audience %q, want the provider's", kf.Issuer, kf.Audience)
	}
	src, err := credential.New(context.Background(), credential.Options{Issuer: kf.Issuer, Key: kf})
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.Token(context.Background())
	return err
}

func TestEnrollCreatesTheDeviceAndAPrivateKeyFile(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	path := filepath.Join(f.dir, "edge-1.json")
	res, err := f.en.Enroll(ctx, enroll.Request{Device: "edge-1", KeyFile: path, Labels: map[string]string{"site": "lab"}})
	if err != nil {
		t.Fatal(err)
	}
	d := f.device(t, "edge-1")
	if diff := cmp.Diff(v1alpha1.DeviceSpec{IdentitySubject: res.Subject}, d.Spec); diff != "" {
		t.Fatalf("Device spec (-want +got):\n%s", diff)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", fi.Mode().Perm())
	}
	kf, err := credential.ReadKeyFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if kf.UserID != res.Subject || kf.KeyID != res.KeyID {
		t.Fatalf("key file %v, want user %s key %s", kf, res.Subject, res.KeyID)
	}
	if err := f.grant(t, path); err != nil {
		t.Fatalf("the new key cannot get a token: %v", err)
	}
	cr, _ := json.Marshal(d)
	for where, text := range map[string]string{"Device resource": string(cr), "log": f.logs.String(), "result": strings.Join([]string{res.Device, res.Subject, res.KeyID, res.KeyFile}, " ")} {
		if strings.Contains(text, "PRIVATE KEY") || strings.Contains(text, strings.Split(kf.Key, "\n")[1]) {
			t.Fatalf("the private key appears in the %s", where)
		}
	}
}

func TestEnrollmentIsRefused(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if _, err := f.en.Enroll(ctx, enroll.Request{Device: "taken", KeyFile: filepath.Join(f.dir, "taken.json")}); err != nil {
		t.Fatal(err)
	}
	existing := filepath.Join(f.dir, "existing.json")
	if err := os.WriteFile(existing, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  enroll.Request
		want error
		text string
	}{
		{"an enrolled device is refused", enroll.Request{Device: "taken", KeyFile: filepath.Join(f.dir, "t2.json")}, enroll.ErrAlreadyEnrolled, ""},
		{"an existing key file is not overwritten", enroll.Request{Device: "new-1", KeyFile: existing}, enroll.ErrKeyFileExists, ""},
		{"a device id with a dot is refused", enroll.Request{Device: "a.b", KeyFile: filepath.Join(f.dir, "ab.json")}, nil, "device id"},
		{"an empty key path is refused", enroll.Request{Device: "new-2"}, nil, "KeyFile"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.en.Enroll(ctx, tc.req)
			if err == nil {
				t.Fatal("accepted")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if tc.text != "" && !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("error %v, want one naming %q", err, tc.text)
			}
		})
	}
}

func TestReenrollReplacesTheKeyAndRevokeQuarantines(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	first := filepath.Join(f.dir, "first.json")
	res, err := f.en.Enroll(ctx, enroll.Request{Device: "edge-2", KeyFile: first})
	if err != nil {
		t.Fatal(err)
	}
	second := filepath.Join(f.dir, "second.json")
	re, err := f.en.Reenroll(ctx, enroll.Request{Device: "edge-2", KeyFile: second})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{res.KeyID}, re.Revoked); diff != "" {
		t.Fatalf("revoked keys (-want +got):\n%s", diff)
	}
	if re.Subject != res.Subject {
		t.Fatalf("re-enrollment changed the subject: %s → %s", res.Subject, re.Subject)
	}
	if err := f.grant(t, first); !errors.Is(err, credential.ErrGrant) {
		t.Fatalf("old key after re-enrollment: %v, want ErrGrant", err)
	}
	if err := f.grant(t, second); err != nil {
		t.Fatalf("new key: %v", err)
	}

	rv, err := f.en.Revoke(ctx, "edge-2")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{re.KeyID}, rv.Revoked); diff != "" {
		t.Fatalf("revoked keys (-want +got):\n%s", diff)
	}
	if err := f.grant(t, second); !errors.Is(err, credential.ErrGrant) {
		t.Fatalf("key after revocation: %v, want ErrGrant", err)
	}
	if got := f.device(t, "edge-2").Labels[v1alpha1.LabelBlacklist]; got != "true" {
		t.Fatalf("blacklist label %q after revocation, want \"true\"", got)
	}
	if _, err := f.en.Revoke(ctx, "never-enrolled"); !errors.Is(err, enroll.ErrNotEnrolled) {
		t.Fatalf("revoking an unknown device: %v, want ErrNotEnrolled", err)
	}
}

// TestEnrollThroughTheManagementAPI enrolls through the Zitadel management
// client (what `fleet enroll` uses) against the development provider's
// management endpoints.
func TestEnrollThroughTheManagementAPI(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	op, err := devop.New(devop.Options{AdminToken: "pat"})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- op.Run(rctx) }()
	defer func() { cancel(); <-done }()
	zc, err := zitadel.New(zitadel.Options{BaseURL: op.Issuer(), Token: "pat"})
	if err != nil {
		t.Fatal(err)
	}
	en, err := enroll.New(enroll.Options{Client: f.c, Provider: zc, Namespace: f.ns, Issuer: op.Issuer(), Audience: op.Audience()})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(f.dir, "api.json")
	res, err := en.Enroll(ctx, enroll.Request{Device: "edge-api", KeyFile: path})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.device(t, "edge-api").Spec.IdentitySubject; got != res.Subject {
		t.Fatalf("identitySubject %q, want %q", got, res.Subject)
	}
	f.op = op
	if err := f.grant(t, path); err != nil {
		t.Fatalf("the minted key cannot get a token: %v", err)
	}
	if _, err := en.Revoke(ctx, "edge-api"); err != nil {
		t.Fatal(err)
	}
	if err := f.grant(t, path); !errors.Is(err, credential.ErrGrant) {
		t.Fatalf("grant after revocation: %v, want ErrGrant", err)
	}
}

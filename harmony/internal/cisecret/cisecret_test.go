package cisecret_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/dev/baostandin"
	"github.com/nationtech/harmony-fleet/harmony/internal/cisecret"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

const password = "push-password-93b1"

type env struct {
	ctx   context.Context
	prov  *devop.Provider
	bao   *baostandin.Server
	admin *openbao.Client
	key   credential.KeyFile
	json  string
}

// start runs the dev provider and the OpenBao stand-in with a CI role
// bound to one machine user, reading harmony/shop/prod/*.
func start(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{ctx: ctx, bao: baostandin.Start(t)}
	if e.prov, err = devop.New(devop.Options{SigningKey: k}); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := e.prov.Run(ctx); err != nil {
			t.Error(err)
		}
	})
	uid, err := e.prov.CreateMachineUser(ctx, "shop-ci")
	must(t, err)
	e.key, err = e.prov.AddMachineKey(ctx, uid, time.Time{})
	must(t, err)
	b, err := e.key.Marshal()
	must(t, err)
	e.json = string(b)
	e.admin, err = openbao.NewWithToken(openbao.Config{Address: e.bao.URL()}, e.bao.RootToken())
	must(t, err)
	must(t, e.admin.ConfigureJWT(ctx, e.prov.Issuer(), ""))
	must(t, e.admin.PutPolicy(ctx, "shop-ci", `path "secret/data/harmony/shop/prod/*" { capabilities = ["read"] }`))
	must(t, e.admin.PutJWTRole(ctx, "shop-ci", openbao.JWTRole{BoundAudiences: []string{e.prov.Audience()}, BoundSubject: uid, Policies: []string{"shop-ci"}}))
	must(t, e.admin.Write(ctx, "harmony/shop/prod/RegistryCredentials", map[string]any{"registry": "Hub.Example:5000", "username": "shop-push", "password": password}))
	must(t, e.admin.Write(ctx, "harmony/shop/prod/kubeconfig", map[string]any{"kubeconfig": "apiVersion: v1\nkind: Config\n"}))
	must(t, e.admin.Write(ctx, "harmony/shop/prod/broken", map[string]any{"registry": "hub.example:5000", "username": "shop-push", "password": 42}))
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) open(t *testing.T, o cisecret.Options) (*cisecret.Session, error) {
	t.Helper()
	store, err := openbao.New(openbao.Config{Address: e.bao.URL(), Role: "shop-ci"})
	must(t, err)
	o.Store = store
	return cisecret.Open(e.ctx, o)
}

func TestTheMachineKeyOpensOpenBaoAndReadsThePushRobotAndTheClusterAccess(t *testing.T) {
	e := start(t)
	s, err := e.open(t, cisecret.Options{KeyJSON: e.json, Issuer: e.prov.Issuer(), Audience: e.prov.Audience()})
	must(t, err)
	creds, err := s.RegistryCredentials(e.ctx, "harmony/shop/prod/RegistryCredentials", "hub.example:5000")
	must(t, err)
	if creds.Username != "shop-push" || creds.Password != password {
		t.Errorf("read %v", creds)
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, creds); strings.Contains(out, password) {
			t.Errorf("%s prints the password: %s", f, out)
		}
	}
	kc, err := s.Kubeconfig(e.ctx, "harmony/shop/prod/kubeconfig")
	if err != nil || !strings.Contains(string(kc), "kind: Config") {
		t.Errorf("kubeconfig %q, %v", kc, err)
	}

	tests := []struct {
		name     string
		read     func() error
		wantErr  error
		wantText string
	}{
		{"a push robot of another registry is refused", func() error {
			_, err := s.RegistryCredentials(e.ctx, "harmony/shop/prod/RegistryCredentials", "hub.example")
			return err
		}, cisecret.ErrSecret, `field "registry" is "Hub.Example:5000" but the context pushes to "hub.example"`},
		{"a field that is not a string is named", func() error {
			_, err := s.RegistryCredentials(e.ctx, "harmony/shop/prod/broken", "hub.example:5000")
			return err
		}, cisecret.ErrSecret, `harmony/shop/prod/broken: field "password"`},
		{"a missing secret is named by its path", func() error {
			_, err := s.Kubeconfig(e.ctx, "harmony/shop/prod/nothing")
			return err
		}, openbao.ErrNotFound, "harmony/shop/prod/nothing"},
		{"a path outside the policy is denied", func() error {
			_, err := s.Kubeconfig(e.ctx, "harmony/other/prod/kubeconfig")
			return err
		}, openbao.ErrPermissionDenied, "harmony/other/prod/kubeconfig"},
		{"a secret without a kubeconfig field is named", func() error {
			_, err := s.Kubeconfig(e.ctx, "harmony/shop/prod/RegistryCredentials")
			return err
		}, cisecret.ErrSecret, `field "kubeconfig"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.read()
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("got %v, want %v saying %q", err, tc.wantErr, tc.wantText)
			}
			if strings.Contains(err.Error(), password) {
				t.Fatalf("the error quotes the password: %v", err)
			}
		})
	}
}

func TestOpenRefusesWhatCannotLogIn(t *testing.T) {
	e := start(t)
	withIssuer := e.key
	withIssuer.Issuer, withIssuer.Audience = e.prov.Issuer(), e.prov.Audience()
	b, err := withIssuer.Marshal()
	must(t, err)
	other, err := e.prov.CreateMachineUser(e.ctx, "not-ci")
	must(t, err)
	otherKey, err := e.prov.AddMachineKey(e.ctx, other, time.Time{})
	must(t, err)
	otherJSON, err := otherKey.Marshal()
	must(t, err)
	tests := []struct {
		name     string
		o        cisecret.Options
		wantErr  error
		wantText string
	}{
		{"an empty variable is named", cisecret.Options{Issuer: e.prov.Issuer()}, cisecret.ErrKeyVariable, cisecret.KeyVariable + " is not a usable"},
		{"a key with a missing field names it", cisecret.Options{KeyJSON: `{"type":"serviceaccount","keyId":"k","key":"x"}`, Issuer: e.prov.Issuer()},
			cisecret.ErrKeyVariable, `"userId"`},
		{"no Zitadel URL anywhere is named", cisecret.Options{KeyJSON: e.json}, cisecret.ErrLogin, "Zitadel.URL"},
		{"a key file's own issuer and audience are used when the context has none", cisecret.Options{KeyJSON: string(b)}, nil, ""},
		{"a machine user the role is not bound to is refused by OpenBao", cisecret.Options{KeyJSON: string(otherJSON), Issuer: e.prov.Issuer()},
			openbao.ErrLogin, "OpenBao"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.open(t, tc.o)
			if tc.wantErr == nil {
				must(t, err)
				return
			}
			if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("got %v, want %v saying %q", err, tc.wantErr, tc.wantText)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Fatalf("the error quotes the key: %v", err)
			}
		})
	}
}

func TestTheSigningKeyIsReadWithItsPassphraseAndNeverShown(t *testing.T) {
	e := start(t)
	const priv, pass = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nc2VjcmV0\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n", "signing-passphrase-value"
	must(t, e.admin.Write(e.ctx, "harmony/shop/prod/signing-key", map[string]any{"privateKey": priv, "passphrase": pass}))
	must(t, e.admin.Write(e.ctx, "harmony/shop/prod/signing-key-bad", map[string]any{"privateKey": priv, "passphrase": 7}))
	s, err := e.open(t, cisecret.Options{KeyJSON: e.json, Issuer: e.prov.Issuer(), Audience: e.prov.Audience()})
	must(t, err)
	k, err := s.SigningKey(e.ctx, "harmony/shop/prod/signing-key")
	must(t, err)
	if string(k.PrivateKey) != priv || string(k.Passphrase) != pass {
		t.Errorf("read %d key bytes and passphrase %d bytes, not the stored ones", len(k.PrivateKey), len(k.Passphrase))
	}
	for _, f := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(f, k); strings.Contains(out, pass) || strings.Contains(out, "c2VjcmV0") {
			t.Errorf("%s prints the key: %s", f, out)
		}
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"a secret without a privateKey field is named", "harmony/shop/prod/kubeconfig", `field "privateKey"`},
		{"a passphrase that is not a string is named", "harmony/shop/prod/signing-key-bad", `field "passphrase" is not a string`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.SigningKey(e.ctx, tc.path)
			if !errors.Is(err, cisecret.ErrSecret) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want ErrSecret saying %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "c2VjcmV0") {
				t.Fatalf("the error quotes the key: %v", err)
			}
		})
	}
}

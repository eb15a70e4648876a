package openbao_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/dev/baostandin"
	"github.com/nationtech/harmony-fleet/identity/credential"
	"github.com/nationtech/harmony-fleet/identity/devop"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// env is a dev OpenID Provider and an OpenBao stand-in configured the way
// Fleet's docs say to configure OpenBao: JWT auth trusting the provider, a
// device role and a policy naming exact paths.
type env struct {
	bao    *baostandin.Server
	admin  *openbao.Client
	prov   *devop.Provider
	device *credential.Source
}

const devicePrefix = "fleet/lab"

func start(t *testing.T) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	prov, err := devop.New(devop.Options{SigningKey: key})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := prov.Run(ctx); err != nil {
			t.Error(err)
		}
	})
	e := &env{bao: baostandin.Start(t), prov: prov}
	e.admin, err = openbao.NewWithToken(openbao.Config{Address: e.bao.URL()}, e.bao.RootToken())
	if err != nil {
		t.Fatal(err)
	}
	uid, err := prov.CreateMachineUser(ctx, "device-d1")
	if err != nil {
		t.Fatal(err)
	}
	kf, err := prov.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if e.device, err = credential.New(ctx, credential.Options{Issuer: prov.Issuer(), Key: kf, Audience: prov.Audience()}); err != nil {
		t.Fatal(err)
	}
	must(t, e.admin.ConfigureJWT(ctx, prov.Issuer(), ""))
	must(t, e.admin.PutPolicy(ctx, "device-d1", `
path "secret/data/fleet/lab/registry/device-pull/hub" { capabilities = ["read"] }
path "secret/data/apps/analysis/*" { capabilities = ["read"] }
path "secret/data/apps/analysis/forbidden" { capabilities = ["deny"] }
`))
	must(t, e.admin.PutJWTRole(ctx, "fleet-device", openbao.JWTRole{
		BoundAudiences: []string{prov.Audience()}, BoundSubject: uid, Policies: []string{"device-d1"}, TTL: time.Hour,
	}))
	must(t, e.admin.PutJWTRole(ctx, "other-audience", openbao.JWTRole{BoundAudiences: []string{"someone-else"}, Policies: []string{"device-d1"}}))
	must(t, e.admin.PutJWTRole(ctx, "other-subject", openbao.JWTRole{BoundAudiences: []string{prov.Audience()}, BoundSubject: "not-this-device", Policies: []string{"device-d1"}}))
	must(t, e.admin.Write(ctx, "apps/analysis/db", map[string]any{"password": "db-secret-value-1", "port": 5432}))
	must(t, e.admin.Write(ctx, "apps/analysis/forbidden", map[string]any{"password": "nope"}))
	must(t, e.admin.Write(ctx, "apps/other/db", map[string]any{"password": "other-secret"}))
	must(t, e.admin.Write(ctx, "fleet/lab/registry/device-pull/hub", map[string]any{
		"registry": "127.0.0.1:5000", "username": "device-pull", "password": "pull-secret-value-1",
	}))
	return e
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) deviceSecrets(t *testing.T, role string) *openbao.DeviceSecrets {
	t.Helper()
	c, err := openbao.New(openbao.Config{Address: e.bao.URL(), Role: role})
	must(t, err)
	ds, err := openbao.NewDeviceSecrets(c, e.device.IDToken, devicePrefix)
	must(t, err)
	return ds
}

func TestADeviceReadsWhatItsPolicyAllowsAndNothingElse(t *testing.T) {
	e := start(t)
	ds := e.deviceSecrets(t, "fleet-device")
	ctx := context.Background()

	v, err := ds.Resolve(ctx, "apps/analysis/db", "password")
	if err != nil || v != "db-secret-value-1" {
		t.Fatalf("Resolve = %q, %v; want the stored password", v, err)
	}
	raw, err := ds.PullCredential(ctx, "hub")
	must(t, err)
	var cred map[string]string
	must(t, json.Unmarshal(raw, &cred))
	if cred["registry"] != "127.0.0.1:5000" || cred["username"] != "device-pull" || cred["password"] != "pull-secret-value-1" {
		t.Fatalf("pull credential = %v", cred)
	}

	tests := []struct {
		name    string
		read    func() error
		want    error
		mention string
	}{
		{"a path outside the policy is refused", func() error { _, err := ds.Resolve(ctx, "apps/other/db", "password"); return err }, openbao.ErrPermissionDenied, "secret/data/apps/other/db"},
		{"a deny rule beats a broader glob", func() error { _, err := ds.Resolve(ctx, "apps/analysis/forbidden", "password"); return err }, openbao.ErrPermissionDenied, "forbidden"},
		{"another pull secret is refused", func() error { _, err := ds.PullCredential(ctx, "other-hub"); return err }, openbao.ErrPermissionDenied, "device-pull/other-hub"},
		{"an allowed path without a secret is not found", func() error { _, err := ds.Resolve(ctx, "apps/analysis/missing", "password"); return err }, openbao.ErrNotFound, "apps/analysis/missing"},
		{"a missing key is named", func() error { _, err := ds.Resolve(ctx, "apps/analysis/db", "user"); return err }, openbao.ErrBadValue, `"user"`},
		{"a value that is not a string is refused", func() error { _, err := ds.Resolve(ctx, "apps/analysis/db", "port"); return err }, openbao.ErrBadValue, `"port"`},
		{"a path escaping with .. is refused before any request", func() error { _, err := ds.Resolve(ctx, "apps/../other/db", "password"); return err }, openbao.ErrBadReference, "apps/../other/db"},
		{"an absolute reference is refused", func() error { _, err := ds.PullCredential(ctx, "/hub"); return err }, openbao.ErrBadReference, "/hub"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.read()
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not name %s", err, tc.mention)
			}
			for _, secret := range []string{"db-secret-value-1", "pull-secret-value-1", "other-secret", "nope"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error %q holds a secret value", err)
				}
			}
		})
	}
}

func TestLoginIsRefusedForAWrongAudienceOrSubject(t *testing.T) {
	e := start(t)
	for _, role := range []string{"other-audience", "other-subject", "no-such-role"} {
		t.Run(role, func(t *testing.T) {
			ds := e.deviceSecrets(t, role)
			_, err := ds.Resolve(context.Background(), "apps/analysis/db", "password")
			if !errors.Is(err, openbao.ErrLogin) {
				t.Fatalf("err = %v, want ErrLogin", err)
			}
			if !strings.Contains(err.Error(), role) {
				t.Errorf("error %q does not name the role", err)
			}
		})
	}
}

func TestARevokedTokenIsReplacedByANewLogin(t *testing.T) {
	e := start(t)
	ds := e.deviceSecrets(t, "fleet-device")
	ctx := context.Background()
	if _, err := ds.Resolve(ctx, "apps/analysis/db", "password"); err != nil {
		t.Fatal(err)
	}
	e.bao.Revoke()
	if v, err := ds.Resolve(ctx, "apps/analysis/db", "password"); err != nil || v != "db-secret-value-1" {
		t.Fatalf("after revocation: %q, %v", v, err)
	}
}

func TestADeviceTokenCannotWriteOrAdminister(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	c, err := openbao.New(openbao.Config{Address: e.bao.URL(), Role: "fleet-device"})
	must(t, err)
	tok, err := e.device.IDToken(ctx)
	must(t, err)
	must(t, c.Login(ctx, tok))
	for name, call := range map[string]func() error{
		"write an allowed path": func() error { return c.Write(ctx, "apps/analysis/db", map[string]any{"password": "x"}) },
		"write a policy":        func() error { return c.PutPolicy(ctx, "device-d1", `path "*" { capabilities = ["sudo","read"] }`) },
		"change a role":         func() error { return c.PutJWTRole(ctx, "fleet-device", openbao.JWTRole{Policies: []string{"root"}}) },
	} {
		t.Run(name, func(t *testing.T) {
			if err := call(); !errors.Is(err, openbao.ErrPermissionDenied) {
				t.Fatalf("err = %v, want ErrPermissionDenied", err)
			}
		})
	}
	if _, err := openbao.NewWithToken(openbao.Config{Address: e.bao.URL()}, "s.not-a-token"); err != nil {
		t.Fatal(err)
	}
	bogus, _ := openbao.NewWithToken(openbao.Config{Address: e.bao.URL()}, "s.not-a-token")
	if _, err := bogus.Read(ctx, "apps/analysis/db"); !errors.Is(err, openbao.ErrPermissionDenied) {
		t.Fatalf("unknown token: err = %v, want ErrPermissionDenied", err)
	}
}

func TestCheckAndSetRefusesAStaleVersion(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	must(t, e.admin.WriteCAS(ctx, "cas/one", map[string]any{"v": "1"}, 0))
	if err := e.admin.WriteCAS(ctx, "cas/one", map[string]any{"v": "again"}, 0); err == nil || !strings.Contains(err.Error(), "check-and-set") {
		t.Fatalf("second create: err = %v, want a check-and-set refusal", err)
	}
	must(t, e.admin.WriteCAS(ctx, "cas/one", map[string]any{"v": "2"}, 1))
	got, err := e.admin.Read(ctx, "cas/one")
	must(t, err)
	if got["v"] != "2" {
		t.Fatalf("read %v, want version 2's data", got)
	}
	p, err := e.admin.Policy(ctx, "device-d1")
	must(t, err)
	if !strings.Contains(p, "device-pull/hub") {
		t.Fatalf("policy read back = %q", p)
	}
	must(t, e.admin.DeletePolicy(ctx, "device-d1"))
	if _, err := e.admin.Policy(ctx, "device-d1"); !errors.Is(err, openbao.ErrNotFound) {
		t.Fatalf("deleted policy: err = %v, want ErrNotFound", err)
	}
}

func TestConfigErrorsNameTheSetting(t *testing.T) {
	if _, err := openbao.New(openbao.Config{}); !errors.Is(err, openbao.ErrConfig) || !strings.Contains(err.Error(), "address") {
		t.Fatalf("empty address: %v", err)
	}
	c, _ := openbao.New(openbao.Config{Address: "http://127.0.0.1:1"})
	if err := c.Login(context.Background(), "x"); !errors.Is(err, openbao.ErrConfig) || !strings.Contains(err.Error(), "role") {
		t.Fatalf("no role: %v", err)
	}
	if _, err := openbao.NewDeviceSecrets(c, func(context.Context) (string, error) { return "", nil }, "../x"); !errors.Is(err, openbao.ErrBadReference) {
		t.Fatalf("bad prefix: %v", err)
	}
}

func TestALoginAfterTheProviderRotatedItsKeyFetchesTheNewKey(t *testing.T) {
	e := start(t)
	ds := e.deviceSecrets(t, "fleet-device")
	ctx := context.Background()
	if _, err := ds.Resolve(ctx, "apps/analysis/db", "password"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.prov.RotateSigningKey(nil, 0); err != nil {
		t.Fatal(err)
	}
	e.device.Invalidate() // the next id_token is signed with the new key
	e.bao.Revoke()        // and the next read must log in with it
	if v, err := ds.Resolve(ctx, "apps/analysis/db", "password"); err != nil || v != "db-secret-value-1" {
		t.Fatalf("after the key rotation: %q, %v", v, err)
	}
}

// TestAGroupRoleBoundToItsDevicesSubjectsRefusesEveryOtherToken binds a
// group's role to its devices' subjects as fleet dev does (bound_claims on
// sub, values added one device at a time) and checks, through the real
// client, that only a listed subject logs in, before and after the
// operator's policy sync rewrote the role's policies.
func TestAGroupRoleBoundToItsDevicesSubjectsRefusesEveryOtherToken(t *testing.T) {
	e := start(t)
	ctx := context.Background()
	const role = "fleet-group-lab-lab"
	must(t, e.admin.PutJWTRole(ctx, role, openbao.JWTRole{
		BoundAudiences: []string{e.prov.Audience()}, BoundClaims: map[string][]string{"sub": {}}, Policies: []string{"device-d1"},
	}))
	login := func() error {
		t.Helper()
		c, err := openbao.New(openbao.Config{Address: e.bao.URL(), Role: role})
		must(t, err)
		tok, err := e.device.IDToken(ctx)
		must(t, err)
		return c.Login(ctx, tok)
	}
	refused := func(when string) {
		t.Helper()
		if err := login(); !errors.Is(err, openbao.ErrLogin) || !strings.Contains(err.Error(), `claim "sub" does not match any associated bound claim values`) {
			t.Errorf("%s: login = %v, want refused on claim sub", when, err)
		}
	}
	refused("with no device bound")
	must(t, e.admin.AddJWTRoleBoundClaimValues(ctx, role, "sub", "another-device"))
	refused("with another device bound")
	must(t, e.admin.AddJWTRoleBoundClaimValues(ctx, role, "sub", e.device.Subject(), "another-device"))
	if err := login(); err != nil {
		t.Errorf("with the device bound: login = %v, want a token", err)
	}
	// The operator's policy sync rewrites the policies alone.
	must(t, e.admin.SetJWTRolePolicies(ctx, role, []string{"device-d1", "fleet-deploy.lab.analysis-api"}))
	if err := login(); err != nil {
		t.Errorf("after the policy sync: login = %v, want a token", err)
	}
	other := "fleet-group-lab-other"
	must(t, e.admin.PutJWTRole(ctx, other, openbao.JWTRole{
		BoundAudiences: []string{e.prov.Audience()}, BoundClaims: map[string][]string{"sub": {"another-device"}},
	}))
	must(t, e.admin.SetJWTRolePolicies(ctx, other, []string{"fleet-deploy.lab.analysis-api"}))
	c, err := openbao.New(openbao.Config{Address: e.bao.URL(), Role: other})
	must(t, err)
	tok, err := e.device.IDToken(ctx)
	must(t, err)
	if err := c.Login(ctx, tok); !errors.Is(err, openbao.ErrLogin) {
		t.Errorf("another group's role after the policy sync: login = %v, want refused", err)
	}
}

package authcallout_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/nationtech/harmony-fleet/authcallout"
)

func TestDevicePermissionsAreExactlyTheDevicesSubjects(t *testing.T) {
	got, err := authcallout.DevicePermissions("dev-a")
	if err != nil {
		t.Fatal(err)
	}
	want := jwt.Permissions{
		Pub: jwt.Permission{Allow: jwt.StringList{
			"fleet.report.dev-a.heartbeat", "fleet.report.dev-a.inventory", "fleet.report.dev-a.workload",
			"fleet.report.dev-a.task", "fleet.report.dev-a.command", "fleet.report.dev-a.health", "fleet.report.dev-a.containers", "fleet.report.dev-a.fetch",
			"$JS.API.DIRECT.GET.KV_fleet-intent.$KV.fleet-intent.dev-a",
			"fleet.logs.dev-a.*.*",
		}},
		Sub: jwt.Permission{Allow: jwt.StringList{
			"fleet.notify.intent.dev-a", "fleet.command.dev-a", "_INBOX_dev-a.>",
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("device permissions (-want +got):\n%s", diff)
	}
}

func TestPermissionsRefuseInvalidNames(t *testing.T) {
	tests := []struct {
		name string
		fn   func() error
	}{
		{"a device id with a dot is refused", func() error { _, err := authcallout.DevicePermissions("a.b"); return err }},
		{"a device id with a wildcard is refused", func() error { _, err := authcallout.DevicePermissions("*"); return err }},
		{"an empty device id is refused", func() error { _, err := authcallout.DevicePermissions(""); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.fn() == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	acc, _ := nkeys.CreateAccount()
	user, _ := nkeys.CreateUser()
	x, _ := nkeys.CreateCurveKeys()
	v, err := authcallout.NewVerifier(authcallout.VerifierOptions{Issuer: "http://idp", Audience: "fleet"})
	if err != nil {
		t.Fatal(err)
	}
	ok := authcallout.Options{Issuer: acc, XKey: x, Account: "FLEET", Verifier: v, Identities: mapIdentities{}}
	tests := []struct {
		name string
		edit func(*authcallout.Options)
		want string // substring of the error; "" valid
	}{
		{"complete options are valid", func(*authcallout.Options) {}, ""},
		{"a missing issuer is named", func(o *authcallout.Options) { o.Issuer = nil }, "Issuer"},
		{"a user key as issuer is refused", func(o *authcallout.Options) { o.Issuer = user }, "account key"},
		{"an account key as xkey is refused", func(o *authcallout.Options) { o.XKey = acc }, "curve"},
		{"an expiry spread above half the lifetime is refused", func(o *authcallout.Options) { o.ExpirySpread = 0.6 }, "ExpirySpread"},
		{"devices placed in the control-plane account are refused", func(o *authcallout.Options) { o.Account, o.DeviceAccount = "FLEET", "FLEET" }, "DeviceAccount"},
		{"a missing verifier is named", func(o *authcallout.Options) { o.Verifier = nil }, "Verifier"},
		{"missing identities are named", func(o *authcallout.Options) { o.Identities = nil }, "Identities"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			tc.edit(&o)
			err := o.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestVerifierOptionsRefuseSymmetricAlgorithms(t *testing.T) {
	_, err := authcallout.NewVerifier(authcallout.VerifierOptions{Issuer: "http://idp", Audience: "fleet", Algorithms: []jwa.SignatureAlgorithm{"HS256"}})
	if err == nil || !strings.Contains(err.Error(), "HS256") {
		t.Fatalf("error %v, want HS256 refused", err)
	}
}

// TestARotatedSigningKeyIsPickedUp: after the provider rotates its key, a
// token signed with the new key verifies (the unknown kid forces a JWKS
// refresh) and one signed with the old key still does while it is listed.
func TestARotatedSigningKeyIsPickedUp(t *testing.T) {
	e := newEnv(t, envOptions{})
	src := e.device(t, "dev-rot", false)
	if c, err := e.connect("dev-rot", src, ""); err != nil {
		t.Fatalf("before rotation: %v", err)
	} else {
		c.Close()
	}
	newKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.op.RotateSigningKey(newKey, 0); err != nil {
		t.Fatal(err)
	}
	src.Invalidate()
	if c, err := e.connect("dev-rot", src, ""); err != nil {
		t.Fatalf("after rotation: %v (refusal %q)", err, e.refusals.last())
	} else {
		c.Close()
	}
	if _, err := e.verifier.Verify(context.Background(), mustToken(t, src)); err != nil {
		t.Fatal(err)
	}
}

func mustToken(t *testing.T, src interface {
	IDToken(context.Context) (string, error)
}) string {
	t.Helper()
	tok, err := src.IDToken(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestReplicasShareTheLoadAndPlainRequestsWork: three callout replicas in
// one queue group on an unencrypted configuration answer every connect
// exactly once.
func TestReplicasShareTheLoadAndPlainRequestsWork(t *testing.T) {
	e := newEnv(t, envOptions{plain: true, replicas: 3})
	src := e.device(t, "dev-rep", false)
	for range 20 {
		c, err := e.connect("dev-rep", src, "")
		if err != nil {
			t.Fatalf("connect: %v (refusal %q)", err, e.refusals.last())
		}
		c.Close()
	}
}

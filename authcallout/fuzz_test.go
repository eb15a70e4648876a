package authcallout_test

import (
	"context"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/devop"
)

// mapIdentities is an in-memory Identities.
type mapIdentities map[string]events.IdentityEntry

func (m mapIdentities) Lookup(_ context.Context, subject string) (events.IdentityEntry, error) {
	if e, ok := m[subject]; ok {
		return e, nil
	}
	return events.IdentityEntry{}, authcallout.ErrUnknownIdentity
}

// FuzzRespond feeds the authorization-request handler arbitrary payloads and
// requests carrying arbitrary tokens. Whatever the input it must not panic,
// and any answer must be a response signed by the issuer for the requesting
// server and user, granting a user JWT only for a token that verifies, with
// exactly the device's permissions, expiring no later than the token.
// `go test` runs the seed corpus; `go test -fuzz FuzzRespond` explores.
func FuzzRespond(f *testing.F) {
	op, v := runProvider(f)
	issuer, _ := nkeys.CreateAccount()
	issuerPub, _ := issuer.PublicKey()
	ids := mapIdentities{"sub-a": {Device: "dev-a"}, "sub-q": {Device: "dev-q", Quarantined: true}}
	svc, err := authcallout.New(authcallout.Options{Issuer: issuer, Account: "FLEET", Verifier: v, Identities: ids})
	if err != nil {
		f.Fatal(err)
	}
	xkey, _ := nkeys.CreateCurveKeys()
	xpub, _ := xkey.PublicKey()
	svcX, err := authcallout.New(authcallout.Options{Issuer: issuer, XKey: xkey, Account: "FLEET", Verifier: v, Identities: ids})
	if err != nil {
		f.Fatal(err)
	}
	serverX, _ := nkeys.CreateCurveKeys()
	serverXPub, _ := serverX.PublicKey()
	serverKP, _ := nkeys.CreateServer()
	userKP, _ := nkeys.CreateUser()
	userPub, _ := userKP.PublicKey()

	now := time.Now()
	claims := func(sub string, exp time.Time) map[string]any {
		return map[string]any{"iss": op.Issuer(), "sub": sub, "aud": []string{op.Audience()}, "iat": now.Unix(), "exp": exp.Unix()}
	}
	kid := op.SigningKeyID()
	f.Add([]byte(nil), forge(f, claims("sub-a", now.Add(time.Hour)), jwa.RS256, signingKey(), kid), false)
	f.Add([]byte(nil), forge(f, claims("sub-q", now.Add(time.Hour)), jwa.RS256, signingKey(), kid), false)
	f.Add([]byte(nil), forge(f, claims("sub-a", now.Add(-time.Hour)), jwa.RS256, signingKey(), kid), false)
	f.Add([]byte(nil), unsigned(f, claims("sub-a", now.Add(time.Hour)), kid), false)
	f.Add([]byte(nil), "", false)
	f.Add([]byte(nil), "a.b.c", false)
	f.Add([]byte("eyJhbGciOiJub25lIn0.e30."), "", false)
	f.Add([]byte("not a jwt"), "x", false)
	f.Add([]byte{0xff, 0x00}, "", false)

	f.Add([]byte(nil), forge(f, claims("sub-a", now.Add(time.Hour)), jwa.RS256, signingKey(), kid), true)
	f.Add([]byte("xkv1 but not sealed by anyone"), "", true)

	f.Fuzz(func(t *testing.T, raw []byte, token string, encrypted bool) {
		data := raw
		var err error
		if len(raw) == 0 {
			rc := jwt.NewAuthorizationRequestClaims(userPub)
			rc.UserNkey = userPub
			rc.Server = jwt.ServerID{ID: "server-1", Name: "fleet"}
			rc.ConnectOptions.Token = token
			enc, err := rc.Encode(serverKP)
			if err != nil {
				t.Skip()
			}
			data = []byte(enc)
		}
		var out []byte
		if encrypted {
			if len(raw) == 0 {
				if data, err = serverX.Seal(data, xpub); err != nil {
					t.Fatal(err)
				}
			}
			out = svcX.Respond(context.Background(), data, serverXPub)
			if len(out) != 0 {
				if out, err = serverX.Open(out, xpub); err != nil {
					t.Fatalf("the encrypted answer does not open: %v", err)
				}
			}
		} else {
			out = svc.Respond(context.Background(), data, "")
		}
		if len(out) == 0 {
			if len(raw) == 0 {
				t.Fatal("a well-formed request got no answer")
			}
			return
		}
		if len(raw) != 0 {
			t.Fatalf("an arbitrary payload got an answer: %q", out)
		}
		resp, err := jwt.DecodeAuthorizationResponseClaims(string(out))
		if err != nil {
			t.Fatalf("answer is not a response JWT: %v", err)
		}
		if resp.Issuer != issuerPub || resp.Subject != userPub || resp.Audience != "server-1" {
			t.Fatalf("response iss %s sub %s aud %s", resp.Issuer, resp.Subject, resp.Audience)
		}
		if resp.Jwt == "" {
			if resp.Error == "" {
				t.Fatal("response holds neither a user JWT nor an error")
			}
			return
		}
		c, err := v.Verify(context.Background(), token)
		if err != nil {
			t.Fatalf("user JWT granted for a token that does not verify: %v", err)
		}
		uc, err := jwt.DecodeUserClaims(resp.Jwt)
		if err != nil {
			t.Fatal(err)
		}
		id, ok := ids[c.Subject]
		if !ok || id.Quarantined {
			t.Fatalf("user JWT granted to subject %q (known %v, entry %+v)", c.Subject, ok, id)
		}
		want, _ := authcallout.DevicePermissions(id.Device)
		if !permsEqual(uc.Permissions, want) {
			t.Fatalf("permissions %+v, want %+v", uc.Permissions, want)
		}
		if uc.Expires == 0 || uc.Expires > c.Expiry.Unix() || uc.Issuer != issuerPub || uc.Audience != authcallout.AccountDevices {
			t.Fatalf("user JWT exp %d (token %d) iss %s aud %s", uc.Expires, c.Expiry.Unix(), uc.Issuer, uc.Audience)
		}
	})
}

func permsEqual(a, b jwt.Permissions) bool {
	eq := func(x, y jwt.StringList) bool {
		if len(x) != len(y) {
			return false
		}
		for i := range x {
			if x[i] != y[i] {
				return false
			}
		}
		return true
	}
	return eq(a.Pub.Allow, b.Pub.Allow) && eq(a.Pub.Deny, b.Pub.Deny) && eq(a.Sub.Allow, b.Sub.Allow) && eq(a.Sub.Deny, b.Sub.Deny) && a.Resp == nil && b.Resp == nil
}

// runProvider runs the development OpenID Provider with signingKey until
// the test ends, and returns it with a Verifier of its id_tokens.
func runProvider(tb testing.TB) (*devop.Provider, *authcallout.Verifier) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	op, err := devop.New(devop.Options{SigningKey: signingKey()})
	if err != nil {
		cancel()
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	tb.Cleanup(func() { cancel(); <-done })
	v, err := authcallout.NewVerifier(authcallout.VerifierOptions{Issuer: op.Issuer(), Audience: op.Audience()})
	if err != nil {
		tb.Fatal(err)
	}
	return op, v
}

package authcallout_test

import (
	"context"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/nationtech/harmony-fleet/authcallout"
)

// Devices that connect together (a cluster restart, a site back online)
// must not all expire, and reconnect, together again every lifetime: the
// user JWTs issued for one id_token expire spread over the configured
// fraction of its remaining lifetime, never after it, and all with it when
// the spread is off.
func TestUserJWTsIssuedTogetherExpireSpreadBeforeTheirToken(t *testing.T) {
	op, v := runProvider(t)
	issuer, _ := nkeys.CreateAccount()
	serverKP, _ := nkeys.CreateServer()
	ids := mapIdentities{"sub-a": {Device: "dev-a"}}
	const lifetime = 10 * time.Minute
	now := time.Now()
	exp := now.Add(lifetime)
	token := forge(t, map[string]any{"iss": op.Issuer(), "sub": "sub-a", "aud": []string{op.Audience()}, "iat": now.Unix(), "exp": exp.Unix()},
		jwa.RS256, signingKey(), op.SigningKeyID())

	tests := []struct {
		name   string
		spread float64
		// earliest is the earliest expiry allowed, as a fraction of the
		// lifetime before the token's.
		earliest float64
		spread0  bool // every user JWT expires with the token
	}{
		{"by default they expire up to a tenth of the lifetime early", 0, authcallout.DefaultExpirySpread, false},
		{"a larger spread spreads them further", 0.5, 0.5, false},
		{"with the spread off they all expire with the token", -1, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := authcallout.New(authcallout.Options{Issuer: issuer, Account: "FLEET", Verifier: v, Identities: ids, ExpirySpread: tc.spread})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[int64]bool{}
			var first, last int64
			for i := range 200 {
				userKP, _ := nkeys.CreateUser()
				userPub, _ := userKP.PublicKey()
				rc := jwt.NewAuthorizationRequestClaims(userPub)
				rc.UserNkey = userPub
				rc.Server = jwt.ServerID{ID: "server-1", Name: "fleet"}
				rc.ConnectOptions.Token = token
				enc, err := rc.Encode(serverKP)
				if err != nil {
					t.Fatal(err)
				}
				resp, err := jwt.DecodeAuthorizationResponseClaims(string(svc.Respond(context.Background(), []byte(enc), "")))
				if err != nil || resp.Jwt == "" {
					t.Fatalf("authorisation %d: %v %q", i, err, resp.Error)
				}
				uc, err := jwt.DecodeUserClaims(resp.Jwt)
				if err != nil {
					t.Fatal(err)
				}
				if uc.Expires > exp.Unix() {
					t.Fatalf("a user JWT expires at %d, after its token (%d)", uc.Expires, exp.Unix())
				}
				if min := exp.Add(-time.Duration(tc.earliest*float64(lifetime)) - time.Second).Unix(); uc.Expires < min {
					t.Fatalf("a user JWT expires at %d, more than %g of the lifetime before its token (%d)", uc.Expires, tc.earliest, exp.Unix())
				}
				seen[uc.Expires] = true
				if i == 0 || uc.Expires < first {
					first = uc.Expires
				}
				last = max(last, uc.Expires)
			}
			switch {
			case tc.spread0 && len(seen) != 1:
				t.Fatalf("with the spread off the user JWTs expire at %d different seconds, want all at the token's", len(seen))
			case !tc.spread0 && last-first < int64(tc.earliest*lifetime.Seconds()/2):
				// 200 draws from a uniform spread of 60 s (or 300 s)
				// cover less than half of it with probability below
				// 2^-199: a failure here means the spread is not drawn.
				t.Fatalf("200 user JWTs expire within %d s of each other, want them spread over about %g s", last-first, tc.earliest*lifetime.Seconds())
			}
		})
	}
}

package authcallout_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/lestrrat-go/jwx/v2/jwa"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/identity/devop"
)

// TestTheVerifierToleratesClockSkewAndNoMore checks exp, nbf and iat at the
// edges of the allowed skew, and the claims it returns.
func TestTheVerifierToleratesClockSkewAndNoMore(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	op, err := devop.New(devop.Options{SigningKey: signingKey()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	defer func() { cancel(); <-done }()
	now := time.Unix(1_900_000_000, 0)
	v, err := authcallout.NewVerifier(authcallout.VerifierOptions{
		Issuer: op.Issuer(), Audience: op.Audience(), ClockSkew: 30 * time.Second, Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	tok := func(edit func(map[string]any)) string {
		c := map[string]any{"iss": op.Issuer(), "sub": "s1", "aud": []string{op.Audience(), "s1"}, "iat": now.Add(-time.Minute).Unix(), "exp": now.Add(time.Minute).Unix(),
			authcallout.RolesClaim: map[string]any{"fleet-shipper": map[string]any{"o": "d"}, "fleet-admin": map[string]any{"o": "d"}}}
		edit(c)
		return forge(t, c, jwa.RS256, signingKey(), op.SigningKeyID())
	}
	tests := []struct {
		name string
		edit func(map[string]any)
		want error
	}{
		{"a current token verifies", func(map[string]any) {}, nil},
		{"a token expired 20s ago is within the skew", func(c map[string]any) { c["exp"] = now.Add(-20 * time.Second).Unix() }, nil},
		{"a token expired 40s ago is refused", func(c map[string]any) { c["exp"] = now.Add(-40 * time.Second).Unix() }, authcallout.ErrInvalidToken},
		{"a token valid from 20s on is within the skew", func(c map[string]any) { c["nbf"] = now.Add(20 * time.Second).Unix() }, nil},
		{"a token valid from 40s on is refused", func(c map[string]any) { c["nbf"] = now.Add(40 * time.Second).Unix() }, authcallout.ErrInvalidToken},
		{"a token issued 40s in the future is refused", func(c map[string]any) { c["iat"] = now.Add(40 * time.Second).Unix() }, authcallout.ErrInvalidToken},
		{"a token without iat is refused", func(c map[string]any) { delete(c, "iat") }, authcallout.ErrInvalidToken},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(context.Background(), tok(tc.edit))
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("error %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(authcallout.Claims{Subject: "s1", Expiry: c.Expiry, Roles: []string{"fleet-admin", "fleet-shipper"}}, c); diff != "" {
				t.Fatalf("claims (-want +got):\n%s", diff)
			}
		})
	}
}

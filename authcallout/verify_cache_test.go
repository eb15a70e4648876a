package authcallout_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/lestrrat-go/jwx/v2/jwk"

	"github.com/nationtech/harmony-fleet/authcallout"
)

// jwksServer serves a key set the test changes.
type jwksServer struct {
	mu   sync.Mutex // guards keys
	keys map[string]*rsa.PrivateKey
	*httptest.Server
}

func newJWKSServer(t *testing.T) *jwksServer {
	t.Helper()
	j := &jwksServer{keys: map[string]*rsa.PrivateKey{}}
	j.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		j.mu.Lock()
		defer j.mu.Unlock()
		set := jwk.NewSet()
		for kid, k := range j.keys {
			pub, err := jwk.FromRaw(k.Public())
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			_ = pub.Set(jwk.KeyIDKey, kid)
			_ = pub.Set(jwk.AlgorithmKey, jwa.RS256)
			_ = set.AddKey(pub)
		}
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(j.Close)
	return j
}

func (j *jwksServer) set(kid string, k *rsa.PrivateKey) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if k == nil {
		delete(j.keys, kid)
		return
	}
	j.keys[kid] = k
}

// TestARememberedTokenIsDecidedAsIfVerifiedAgain: the verifier remembers
// tokens that verified (a reconnect does not pay the signature check
// again), and a remembered token is refused exactly when verifying it
// again would refuse it: once it expires, once its key is removed from the
// provider's JWKS or replaced under the same kid (after the re-fetch that
// shows it), and every token, remembered or not, is refused while the key
// set cannot be fetched once it is due.
func TestARememberedTokenIsDecidedAsIfVerifiedAgain(t *testing.T) {
	const issuer, audience = "https://op.test", "fleet-project"
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// change happens after the token verified once; it may move the
		// clock and change the served keys.
		change func(t *testing.T, j *jwksServer, v *authcallout.Verifier, clock *time.Time)
		want   error
	}{
		{"a remembered token verifies again", func(*testing.T, *jwksServer, *authcallout.Verifier, *time.Time) {}, nil},
		{"a remembered token is refused once it expired", func(_ *testing.T, _ *jwksServer, _ *authcallout.Verifier, clock *time.Time) {
			*clock = clock.Add(2 * time.Minute) // exp + 60s: beyond the 30s skew
		}, authcallout.ErrInvalidToken},
		{"a remembered token is refused once its key left the JWKS", func(t *testing.T, j *jwksServer, v *authcallout.Verifier, _ *time.Time) {
			j.set("k1", nil)
			j.set("k2", other)
			if err := v.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
		}, authcallout.ErrUnknownKey},
		{"a remembered token is refused once its kid names another key", func(t *testing.T, j *jwksServer, v *authcallout.Verifier, _ *time.Time) {
			j.set("k1", other)
			if err := v.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
		}, authcallout.ErrInvalidToken},
		{"a removed key is noticed at the periodic refresh without an explicit one", func(_ *testing.T, j *jwksServer, _ *authcallout.Verifier, clock *time.Time) {
			j.set("k1", nil)
			j.set("k2", other)
			*clock = clock.Add(16 * time.Second) // beyond RefreshInterval (15s), before exp
		}, authcallout.ErrUnknownKey},
		{"a remembered token is refused while the due key set cannot be fetched", func(_ *testing.T, j *jwksServer, _ *authcallout.Verifier, clock *time.Time) {
			j.Close()
			*clock = clock.Add(16 * time.Second)
		}, authcallout.ErrJWKS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			j := newJWKSServer(t)
			j.set("k1", signingKey())
			clock := time.Unix(1_900_000_000, 0)
			var mu sync.Mutex
			v, err := authcallout.NewVerifier(authcallout.VerifierOptions{
				Issuer: issuer, Audience: audience, JWKSURL: j.URL,
				RefreshInterval: 15 * time.Second, MinRefreshInterval: time.Hour,
				Now: func() time.Time { mu.Lock(); defer mu.Unlock(); return clock },
			})
			if err != nil {
				t.Fatal(err)
			}
			tok := forge(t, map[string]any{"iss": issuer, "sub": "s1", "aud": []string{audience},
				"iat": clock.Add(-time.Minute).Unix(), "exp": clock.Add(time.Minute).Unix()}, jwa.RS256, signingKey(), "k1")
			if _, err := v.Verify(context.Background(), tok); err != nil {
				t.Fatalf("first verification: %v", err)
			}
			mu.Lock()
			now := clock
			mu.Unlock()
			tc.change(t, j, v, &now)
			mu.Lock()
			clock = now
			mu.Unlock()
			c, err := v.Verify(context.Background(), tok)
			if tc.want == nil {
				if err != nil || c.Subject != "s1" {
					t.Fatalf("second verification: %+v, %v", c, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("second verification: %v, want %v", err, tc.want)
			}
		})
	}
}

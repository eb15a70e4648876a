package authcallout

import (
	"testing"
	"time"
)

// TestASpreadExpiryKeepsAtLeastTheLifetimeItPromises: whatever the draw,
// a user JWT's expiry is a whole second, never after its id_token's, and
// never earlier than the spread allows, so a token with a second or two
// left is not issued a user JWT that expired on arrival.
func TestASpreadExpiryKeepsAtLeastTheLifetimeItPromises(t *testing.T) {
	exp := time.Unix(1_800_000_000, 0) // an id_token's exp: whole seconds
	for _, tc := range []struct {
		name string
		left time.Duration
	}{
		{"a token with 1.2 s left", 1200 * time.Millisecond},
		{"a token with 1.9 s left", 1900 * time.Millisecond},
		{"a token with 2 s left", 2 * time.Second},
		{"a ten-minute token", 10 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := exp.Add(-tc.left)
			for _, spread := range []float64{DefaultExpirySpread, MaxExpirySpread} {
				for _, u := range []float64{0, 0.1, 0.5, 0.9, 0.999} {
					got := spreadExpiry(exp, now, spread, u)
					floor := exp.Add(-time.Duration(float64(tc.left) * spread * u))
					if got.After(exp) || got.Before(floor) || !got.Equal(got.Truncate(time.Second)) {
						t.Errorf("spread %v, draw %v: expires %s after now, want a whole second within [%s, %s]",
							spread, u, got.Sub(now), floor.Sub(now), exp.Sub(now))
					}
				}
			}
		})
	}
}

package fleetview

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestMockIsTheSameForTheSameSeedAndInstant(t *testing.T) {
	ctx := context.Background()
	at := time.Date(2026, 3, 14, 15, 0, 0, 0, time.UTC)
	clock := func() time.Time { return at.Add(time.Minute) }
	a, err := mockAt(7, 300, at, clock).Devices(ctx, DeviceQuery{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	b, err := mockAt(7, 300, at, clock).Devices(ctx, DeviceQuery{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("two mocks of one seed differ (-first +second):\n%s", diff)
	}
	c, err := mockAt(8, 300, at, clock).Devices(ctx, DeviceQuery{Limit: 500})
	if err != nil {
		t.Fatal(err)
	}
	if cmp.Equal(a, c) {
		t.Error("two seeds gave the same fleet")
	}
}

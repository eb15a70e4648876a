package slowlink_test

import (
	"context"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/slowlink"
)

// TestFetchGetsAWholeBlobThroughALinkThatResets: through a steady link
// and through a lossy one that resets connections, Fetch resumes with
// Range requests until it has every byte of the Blob, each once.
func TestFetchGetsAWholeBlobThroughALinkThatResets(t *testing.T) {
	const size = 512 << 10
	blob, err := slowlink.ServeBlob(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blob.Close() })
	for _, tc := range []struct {
		name       string
		resetEvery int64
		wantResets bool
	}{{"a steady link", 0, false}, {"a lossy link", 64 << 10, true}} {
		t.Run(tc.name, func(t *testing.T) {
			l := start(t, slowlink.Options{Target: blob.Addr(), BytesPerSecond: 16 << 20, ResetEvery: tc.resetEvery, Seed: 7})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			got, err := slowlink.Fetch(ctx, l.Addr(), blob.Size())
			if err != nil || got != size {
				t.Fatalf("Fetch = %d bytes, %v; want %d, nil", got, err, size)
			}
			if resets := l.Resets(); (resets > 0) != tc.wantResets {
				t.Errorf("the link reset %d connections, want resets %v", resets, tc.wantResets)
			}
		})
	}
	t.Run("a blob of no bytes is refused naming the size", func(t *testing.T) {
		if _, err := slowlink.ServeBlob(0); err == nil {
			t.Error("ServeBlob(0) = nil error")
		}
	})
}

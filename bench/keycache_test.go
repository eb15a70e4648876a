package bench

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTheKeyCacheGeneratesMissingFilesOnceAndLoadsDistinctKeys(t *testing.T) {
	ctx := context.Background()
	c := KeyCache{Dir: t.TempDir(), PerFile: 4}
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	generated, err := c.Ensure(ctx, log, 10)
	if err != nil {
		t.Fatal(err)
	}
	if generated != 12 {
		t.Fatalf("generated %d keys for 10 devices at 4 per file, want 12 (3 files)", generated)
	}
	if generated, err = c.Ensure(ctx, log, 10); err != nil || generated != 0 {
		t.Fatalf("second Ensure generated %d keys (error %v), want 0: the cache is full", generated, err)
	}
	keys, err := c.Load(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 10 {
		t.Fatalf("loaded %d keys, want 10", len(keys))
	}
	seen := map[string]bool{}
	for i, k := range keys {
		if k.N.BitLen() != 2048 {
			t.Errorf("key %d has %d bits, want 2048", i, k.N.BitLen())
		}
		if seen[k.N.String()] {
			t.Errorf("key %d repeats an earlier key", i)
		}
		seen[k.N.String()] = true
	}
	// Another size per file is another cache: no file is shared.
	if generated, err = (KeyCache{Dir: c.Dir, PerFile: 5}).Ensure(ctx, log, 5); err != nil || generated != 5 {
		t.Fatalf("Ensure at 5 per file generated %d (error %v), want 5", generated, err)
	}
}

func TestATruncatedKeyFileIsNamedWithTheFix(t *testing.T) {
	ctx := context.Background()
	c := KeyCache{Dir: t.TempDir(), PerFile: 2}
	if _, err := c.Ensure(ctx, slog.New(slog.DiscardHandler), 2); err != nil {
		t.Fatal(err)
	}
	f := c.file(0)
	raw, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, raw[:len(raw)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = c.Load(ctx, 2)
	if err == nil || !strings.Contains(err.Error(), filepath.Base(f)) || !strings.Contains(err.Error(), "delete the file") {
		t.Fatalf("Load of a truncated file: error %v, want one naming %s and the fix", err, filepath.Base(f))
	}
	if left, _ := filepath.Glob(filepath.Join(c.Dir, ".rsa2048-*")); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

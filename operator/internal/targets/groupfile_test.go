package targets_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/testenv"
	"github.com/nationtech/harmony-fleet/operator/internal/targets"
)

// TestAReplacedGroupFileIsReadAgain: the group file's watch replaces the
// table when the file changes, and tells subscribers which devices'
// groups changed; a file that no longer parses keeps the table as it was.
func TestAReplacedGroupFileIsReadAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(t.TempDir(), "groups.json")
	write := func(s string) {
		t.Helper()
		// Written aside and renamed, as a ConfigMap update does.
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"namespaces": {"lab": {"lyon": ["rpi-1"]}}}`)
	g, err := targets.LoadGroupFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var changed []string
	defer g.Subscribe(func(ns, dev string) {
		mu.Lock()
		changed = append(changed, ns+"/"+dev)
		mu.Unlock()
	})()
	w := &targets.GroupFileWatch{Path: path, Groups: g, Interval: 20 * time.Millisecond, Log: slog.New(slog.DiscardHandler)}
	if err := w.Validate(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	groupsOf := func(dev string) []string {
		gs, _ := g.Groups(ctx, "lab", dev)
		return gs
	}

	write(`{"namespaces": {"lab": {"lyon": ["rpi-1", "rpi-2"]}}}`)
	if err := testenv.Poll(ctx, 30*time.Second, func() bool { return slices.Equal(groupsOf("rpi-2"), []string{"lyon"}) }); err != nil {
		t.Fatalf("%v waiting for rpi-2 in lyon", err)
	}
	mu.Lock()
	if !slices.Equal(changed, []string{"lab/rpi-2"}) {
		t.Errorf("changed %v, want [lab/rpi-2]", changed)
	}
	mu.Unlock()

	write(`{"namespaces": `) // broken: kept as it was
	write(`{"namespaces": {"lab": {"lyon": ["rpi-2"]}}}`)
	if err := testenv.Poll(ctx, 30*time.Second, func() bool { return len(groupsOf("rpi-1")) == 0 }); err != nil {
		t.Fatalf("%v waiting for rpi-1 out of lyon", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
}

// TestAGroupFileWatchSaysWhatIsMissing: Validate names the field and
// the fix.
func TestAGroupFileWatchSaysWhatIsMissing(t *testing.T) {
	for _, tc := range []struct {
		name string
		w    targets.GroupFileWatch
		want string
	}{
		{"no path", targets.GroupFileWatch{Groups: targets.NewStaticGroups(nil)}, "group file watch: Path is empty: set the group file's path"},
		{"no table", targets.GroupFileWatch{Path: "g.json"}, "group file watch: Groups is nil: set the table LoadGroupFile returned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.w.Validate()
			if err == nil || err.Error() != tc.want {
				t.Errorf("Validate: %v, want %q", err, tc.want)
			}
		})
	}
}

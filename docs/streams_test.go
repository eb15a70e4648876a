package docs

import (
	"os"
	"strings"
	"testing"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// TestTheDocumentedStreamListsAreComplete keeps the two lists of the Fleet
// streams a newcomer reads first true to what events.Provision creates:
// getting-started.md's `nats stream ls` output and operations.md's backup
// table (which also lists the KV buckets).
func TestTheDocumentedStreamListsAreComplete(t *testing.T) {
	streams := events.StreamConfigs(events.ProvisionOptions{})
	if len(streams) < 6 {
		t.Fatalf("events.StreamConfigs returns %d streams, want at least 6", len(streams))
	}
	ls := testenv.DocBlock(t, "docs/getting-started.md", "nats stream ls\n", "text")
	b, err := os.ReadFile("operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, backup, ok := strings.Cut(string(b), "## Backup and restore of the streams")
	if !ok {
		t.Fatal("operations.md has no section ## Backup and restore of the streams")
	}
	backup, _, _ = strings.Cut(backup, "\n## ")
	for _, s := range streams {
		if !strings.Contains(ls, "│ "+s.Name+" ") {
			t.Errorf("getting-started.md's `nats stream ls` output has no row for %s", s.Name)
		}
		if !strings.Contains(backup, "`"+s.Name+"`") {
			t.Errorf("operations.md's backup table does not list %s", s.Name)
		}
	}
	for _, kv := range events.KeyValueConfigs(events.ProvisionOptions{}) {
		if !strings.Contains(backup, "`KV_"+kv.Bucket+"`") {
			t.Errorf("operations.md's backup table does not list the bucket %s (KV_%s)", kv.Bucket, kv.Bucket)
		}
	}
}

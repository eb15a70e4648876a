package docs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	"github.com/nationtech/harmony-fleet/internal/natstest"
)

// TestTheIndexRebuildRecipeRefillsTheSameIndex runs operations.md's
// recipe that deletes the exposure index on a server whose index the
// writer built from the example history, then does what the restarted
// operator does (provision, the writer from an empty index): the new
// index is the old one, record for record.
func TestTheIndexRebuildRecipeRefillsTheSameIndex(t *testing.T) {
	nats := natsCLI(t)
	rs := recipes(t, "operations.md", "recipe")
	if len(rs) != 1 {
		t.Fatalf("found %d nats recipes in operations.md, want the index rebuild's", len(rs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, st := natstest.Provisioned(t)
	seed(t, ctx, st)
	// A later revision replaces the first on rpi-042: an ended and an
	// opened record.
	ev := mustEvent(t, events.Keys{Device: "rpi-042"}, events.WorkloadStatus{Namespace: "lab", Deployment: "analysis-api",
		UID: "9b0c6a1e-uid", Generation: 2, RevisionID: "9b0c6a1e-2", Phase: events.WorkloadApplying, Since: time.Now().UTC()})
	if err := st.Report(ctx, ev); err != nil {
		t.Fatal(err)
	}
	if err := (&history.ExposureIndexWriter{Store: st}).RunToEnd(ctx); err != nil {
		t.Fatal(err)
	}
	want := natstest.ExposureIndex(t, ctx, st)
	if len(want) < 3 {
		t.Fatalf("the example history indexes into %d records: the comparison would say little", len(want))
	}
	home := t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", rs[0].script)
	cmd.Env = append(os.Environ(), "NATS_URL="+srv.ClientURL(),
		"PATH="+filepath.Dir(nats)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("recipe failed: %v\n%s", err, out.String())
	}
	for _, w := range rs[0].expect {
		if !strings.Contains(out.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, out.String())
		}
	}
	if _, err := st.JetStream().Stream(ctx, events.StreamIndex); err == nil {
		t.Fatalf("the recipe left %s in place:\n%s", events.StreamIndex, out.String())
	}
	// The operator restarted: it provisions, and its leader refills.
	if err := events.Provision(ctx, st.JetStream(), events.ProvisionOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := (&history.ExposureIndexWriter{Store: st}).RunToEnd(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, natstest.ExposureIndex(t, ctx, st)); diff != "" {
		t.Errorf("the refilled index differs (-before +after):\n%s", diff)
	}
}

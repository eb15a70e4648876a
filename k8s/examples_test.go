package k8s_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
)

// TestEveryExampleIsAcceptedByTheAPIServer applies every manifest of
// examples/ with a server-side dry run: the CRD schema, its CEL rules and
// the admission policies accept each one as it is written.
func TestEveryExampleIsAcceptedByTheAPIServer(t *testing.T) {
	srv := kubeapi.Shared(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found %d examples: %v; were they moved?", len(files), files)
	}
	if out, err := srv.Kubectl(ctx, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: examples}\n"), "apply", "-f", "-"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out, err := srv.Kubectl(ctx, b, "apply", "-n", "examples", "--dry-run=server", "-f", "-")
			if err != nil {
				t.Fatalf("the API server refuses %s: %v\n%s", f, err, out)
			}
			if !strings.Contains(string(out), "(server dry run)") {
				t.Errorf("kubectl said: %s", out)
			}
		})
	}
}

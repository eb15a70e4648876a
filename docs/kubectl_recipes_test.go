package docs

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/operator"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	kubeapi.Main(m, kubeapi.Options{CRDDirs: []string{"../k8s/config/crd"}})
}

// TestKubectlRecipes runs the kubectl recipes of operator.md, in order, with
// the real kubectl against a real API server and a running operator.
func TestKubectlRecipes(t *testing.T) {
	srv := kubeapi.Shared(t)
	rs := recipes(t, "operator.md", "kubectl-recipe")
	if len(rs) < 5 {
		t.Fatalf("found %d kubectl recipes in operator.md; the marker format changed?", len(rs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, st := natstest.Provisioned(t)
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	opCtx, stopOp := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- operator.Run(opCtx, operator.Options{RESTConfig: srv.RESTConfig(), Store: st, Reader: st, IntentKV: kv,
			Logger: slog.New(slog.DiscardHandler), StatusInterval: 100 * time.Millisecond})
	}()
	defer func() {
		stopOp()
		if err := <-done; err != nil {
			t.Errorf("operator: %v", err)
		}
	}()

	for _, r := range rs {
		t.Run(r.script, func(t *testing.T) {
			rctx, rcancel := context.WithTimeout(ctx, 90*time.Second)
			defer rcancel()
			cmd := exec.CommandContext(rctx, "bash", "-euo", "pipefail", "-c", r.script)
			cmd.Dir = ".."
			cmd.Env = append(os.Environ(), "KUBECONFIG="+srv.KubeconfigPath(),
				"PATH="+filepath.Dir(srv.KubectlPath())+string(os.PathListSeparator)+os.Getenv("PATH"))
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Fatalf("recipe failed: %v\n%s", err, out.String())
			}
			for _, want := range r.expect {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
		})
	}
}

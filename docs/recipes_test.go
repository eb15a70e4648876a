package docs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natstest"
	"github.com/nationtech/harmony-fleet/internal/testenv"
)

// recipeRE matches a recipe marker and the sh block after it.
var recipeRE = regexp.MustCompile("(?s)<!-- (recipe|kubectl-recipe)( live)? expect=\"([^\"]*)\" -->\\s*```sh\\n(.*?)```")

type recipe struct {
	kind   string // "recipe" (nats) or "kubectl-recipe"
	script string
	expect []string
	live   bool
}

func recipes(t *testing.T, doc, kind string) []recipe {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	var out []recipe
	for _, m := range recipeRE.FindAllStringSubmatch(string(b), -1) {
		if m[1] == kind {
			out = append(out, recipe{kind: m[1], script: strings.TrimSpace(m[4]), expect: strings.Split(m[3], "|"), live: m[2] != ""})
		}
	}
	return out
}

// natsCLI finds the nats CLI built by `task setup:natscli`.
func natsCLI(t *testing.T) string {
	t.Helper()
	path := os.Getenv("FLEET_NATS_CLI")
	if path == "" {
		path = filepath.Join("..", ".cache", "tools", "natscli-v0.5.0", "nats")
	}
	abs, err := filepath.Abs(path)
	if err == nil {
		_, err = exec.LookPath(abs)
	}
	if err != nil {
		testenv.Missing(t, "the nats CLI v0.5.0", "go tool -modfile=tools/go.mod task setup:natscli", err)
	}
	return abs
}

func mustEvent(t *testing.T, keys events.Keys, d events.Data, opts ...events.Option) events.Event {
	t.Helper()
	ev, err := events.New(keys, d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

// seed stores the example history the recipes read.
func seed(t *testing.T, ctx context.Context, st *events.Store) {
	t.Helper()
	dep := events.Keys{Namespace: "lab", Name: "analysis-api"}
	corr := events.WithCorrelation("9b0c6a1e-uid", 1)
	var b events.Batch
	b.Add(mustEvent(t, dep, events.DeploymentRevisionCreated{UID: "9b0c6a1e-uid", Generation: 1, RevisionID: "9b0c6a1e-1",
		ScoreDigest: "sha256:00", Score: json.RawMessage(`{"type":"PodmanV0"}`),
		Targets: []string{"rpi-042", "rpi-043"}, Canaries: []string{"rpi-042"}}, corr))
	for _, typ := range []events.Type{events.TypeRolloutStarted, events.TypeRolloutCanaryStage, events.TypeRolloutCanariesConverged,
		events.TypeRolloutReleased, events.TypeRolloutSucceeded} {
		b.Add(mustEvent(t, dep, events.NewRolloutTransition(typ, events.RolloutTransition{UID: "9b0c6a1e-uid", Generation: 1,
			RevisionID: "9b0c6a1e-1", Counts: events.RolloutCounts{Total: 2, Canaries: 1}}), corr))
	}
	if _, err := st.AppendBatch(ctx, &b); err != nil {
		t.Fatal(err)
	}
	// The devices' reports, as agents send them (never acknowledged).
	var reports []events.Event
	for _, dev := range []string{"rpi-042", "rpi-043"} {
		reports = append(reports, mustEvent(t, events.Keys{Device: dev}, events.WorkloadStatus{Namespace: "lab", Deployment: "analysis-api",
			UID: "9b0c6a1e-uid", Generation: 1, RevisionID: "9b0c6a1e-1", Phase: events.WorkloadConverged, Since: time.Now().UTC()}, corr),
			mustEvent(t, events.Keys{Device: dev}, events.DeviceHeartbeat{AgentVersion: "0.1.0"}))
	}
	if err := st.Report(ctx, reports...); err != nil {
		t.Fatal(err)
	}
	kv, err := st.JetStream().KeyValue(ctx, events.BucketIntent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "rpi-042", []byte(`{"deployments":[{"namespace":"lab","name":"analysis-api","uid":"9b0c6a1e-uid","generation":1}]}`)); err != nil {
		t.Fatal(err)
	}
}

func TestNATSRecipes(t *testing.T) {
	nats := natsCLI(t)
	rs := recipes(t, "debugging-with-nats.md", "recipe")
	if len(rs) < 10 {
		t.Fatalf("found %d recipes in debugging-with-nats.md; the marker format changed?", len(rs))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, st := natstest.Provisioned(t)
	seed(t, ctx, st)
	home := t.TempDir()

	for _, r := range rs {
		t.Run(r.script, func(t *testing.T) {
			rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
			defer rcancel()
			if r.live {
				// Publish heartbeats until the command has what it waits for.
				go func() {
					for i := 0; rctx.Err() == nil; i++ {
						ev, err := events.New(events.Keys{Device: "rpi-042"}, events.DeviceHeartbeat{AgentVersion: "0.1.0"})
						if err != nil {
							return
						}
						if err := st.Report(rctx, ev); err != nil {
							return
						}
						select {
						case <-rctx.Done():
						case <-time.After(50 * time.Millisecond):
						}
					}
				}()
			}
			cmd := exec.CommandContext(rctx, "bash", "-euo", "pipefail", "-c", r.script)
			cmd.Env = append(os.Environ(),
				"NATS_URL="+srv.ClientURL(),
				"PATH="+filepath.Dir(nats)+string(os.PathListSeparator)+os.Getenv("PATH"),
				"HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
			)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if errors.Is(rctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("recipe did not finish in 30s:\n%s", out.String())
			}
			if err != nil {
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

package e2e

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/testenv/kubeapi"
	"github.com/nationtech/harmony-fleet/operator"
)

// runOperator runs the operator on srv and st until the test ends; the
// test fails if it returns an error.
func runOperator(t *testing.T, ctx context.Context, srv *kubeapi.Server, st *events.Store, kv jetstream.KeyValue, o operator.Options) {
	t.Helper()
	o.RESTConfig, o.Store, o.Reader, o.IntentKV = srv.RESTConfig(), st, st, kv
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- operator.Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("operator.Run: %v", err)
		}
	})
}

// kubectlFor returns a runner of the real kubectl against srv that fails the
// test on an error and returns the output.
func kubectlFor(t *testing.T, ctx context.Context, srv *kubeapi.Server) func(stdin string, args ...string) string {
	return func(stdin string, args ...string) string {
		t.Helper()
		var in []byte
		if stdin != "" {
			in = []byte(stdin)
		}
		out, err := srv.Kubectl(ctx, in, args...)
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
}

// quietLogger logs warnings and errors only.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// Package devenv runs the Fleet control plane on one machine for `fleet dev`:
// today the embedded NATS JetStream server with the Fleet streams and KV
// buckets provisioned on a persistent data folder. It owns the wiring and the
// lifecycle of the parts it starts; the parts themselves live in their own
// packages. Only cmd/fleet imports it.
package devenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/internal/natsembed"
)

// Options configure `fleet dev`.
type Options struct {
	// DataDir holds everything that must survive a restart (the JetStream
	// store). The next run on the same folder resumes the same state.
	DataDir string
	// NATSPort is the client port of the embedded server. Default 4222.
	NATSPort int
	// Logger receives the components' logs.
	Logger *slog.Logger
	// Out receives the usage instructions printed once everything is up.
	Out io.Writer
	// Ready, if set, is called with the NATS URL once everything is up.
	Ready func(natsURL string)
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.DataDir == "" {
		errs = append(errs, errors.New("fleet dev: data folder is empty: pass --data-dir"))
	}
	if o.NATSPort < -1 || o.NATSPort > 65535 {
		errs = append(errs, fmt.Errorf("fleet dev: --nats-port %d: use 1..65535 (or -1 for any free port)", o.NATSPort))
	}
	return errors.Join(errs...)
}

// NotYetWired lists the components of the full `fleet dev` that this build
// does not start yet, so the printed summary never pretends they run.
var NotYetWired = []string{
	"kube-apiserver + etcd and the operator",
	"auth callout and dev OpenID Provider",
	"device agents",
}

// Run starts the embedded control plane, prints how to use it, and blocks
// until ctx ends; then it stops everything and returns.
func Run(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.NATSPort == 0 {
		o.NATSPort = 4222
	}
	store := filepath.Join(o.DataDir, "jetstream")
	if err := os.MkdirAll(store, 0o700); err != nil {
		return fmt.Errorf("fleet dev: data folder: %w", err)
	}
	natsLevel := slog.LevelWarn
	if o.Logger.Enabled(ctx, slog.LevelDebug) {
		natsLevel = slog.LevelDebug
	}
	srv, err := natsembed.Start(natsembed.Options{
		StoreDir: store, Port: o.NATSPort, ServerName: "fleet-dev",
		Logger: slog.New(minLevel{o.Logger.With("component", "nats").Handler(), natsLevel}),
	})
	if err != nil {
		return fmt.Errorf("fleet dev: %w", err)
	}
	defer srv.Shutdown()

	nc, err := nats.Connect(srv.ClientURL(), nats.Name("fleet-dev"))
	if err != nil {
		return fmt.Errorf("fleet dev: connect to embedded NATS: %w", err)
	}
	defer nc.Close()
	st, err := events.NewStore(nc, events.StoreOptions{Logger: o.Logger})
	if err != nil {
		return fmt.Errorf("fleet dev: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = events.Provision(pctx, st.JetStream(), events.ProvisionOptions{})
	cancel()
	if err != nil {
		return fmt.Errorf("fleet dev: %w", err)
	}
	printUsage(o.Out, srv.ClientURL(), o.DataDir)
	if o.Ready != nil {
		o.Ready(srv.ClientURL())
	}
	o.Logger.Info("fleet dev running", "nats", srv.ClientURL(), "data", o.DataDir)
	<-ctx.Done()
	o.Logger.Info("fleet dev stopping")
	return nil
}

func printUsage(w io.Writer, url, dataDir string) {
	fmt.Fprintf(w, `fleet dev is running (Ctrl-C stops it; the next run resumes from %s)

  NATS JetStream   %s   (Fleet streams and KV buckets provisioned)

Point the nats CLI at it:
  export NATS_URL=%s
  nats stream ls
  nats sub --stream FLEET_ROLLOUT --all 'fleet.rollout.deployment.*.*'

See docs/debugging-with-nats.md for more recipes.
`, dataDir, url, url)
	fmt.Fprintln(w, "\nNot started by this build yet:")
	for _, c := range NotYetWired {
		fmt.Fprintln(w, "  -", c)
	}
}

// minLevel drops records below a level: the embedded server's start-up
// banner is noise in `fleet dev` (run with -v to see it).
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

// Package natsembed runs nats-server v2 in-process with JetStream: the
// embedded default of `fleet dev` and the server every test uses (port -1 and
// a temporary store there). It owns the server's lifecycle and its fsync
// policy (see docs/adr/0002-durability-policy.md); it knows nothing of Fleet
// streams (package events provisions those).
//
// The one-machine control plane (controlplane, through which
// `fleet dev` runs it), the scale benchmark, the NATS test harnesses
// (internal/natstest, internal/callouttest) and tests may import it; the
// binaries that run in a cluster or on a device never link it
// (internal/hygiene checks).
package natsembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// SyncPolicy is when JetStream's file store fsyncs written messages.
type SyncPolicy struct {
	// Always fsyncs every write before the publish is acknowledged: an
	// acknowledged event survives power loss. This is DefaultSync.
	Always bool
	// Interval fsyncs periodically (Always false). Acknowledged writes of the
	// last interval are lost on power loss (not on a process crash: the OS
	// page cache keeps them).
	Interval time.Duration
}

// DefaultSync is the policy used when Options.Sync is the zero value: fsync
// on every write. On one server there is no replica to recover from, and the
// event log is the audit trail; ADR 0002 records the measured cost.
var DefaultSync = SyncPolicy{Always: true}

// FastSync is the server's own default (fsync every 2 minutes). Tests that do
// not test durability use it; never use it for data that must survive power
// loss.
var FastSync = SyncPolicy{Interval: 2 * time.Minute}

// Options configure an embedded server.
type Options struct {
	// Host to listen on. Default 127.0.0.1.
	Host string
	// Port to listen on; -1 picks a free port. Default 4222.
	Port int
	// StoreDir is the JetStream store directory. Required: a persistent
	// folder for `fleet dev`, a temporary one in tests.
	StoreDir string
	// ServerName names the server (JetStream needs a stable name across
	// restarts on the same store). Default "fleet".
	ServerName string
	// Sync is the fsync policy. The zero value means DefaultSync.
	Sync SyncPolicy
	// Config is optional nats-server configuration text (accounts,
	// authorization, auth callout) parsed before the fields above are
	// applied; the fields above win.
	Config string
	// Logger receives the server's log. Default: discard.
	Logger *slog.Logger
	// Debug enables the server's debug log.
	Debug bool
	// ReadyTimeout bounds how long Start waits for the server to accept
	// connections. Default 10s.
	ReadyTimeout time.Duration
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.StoreDir == "" {
		errs = append(errs, errors.New("natsembed: StoreDir is empty: give a directory for the JetStream store"))
	}
	if o.Port < -1 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("natsembed: Port %d: use -1 (any free port) or 0..65535", o.Port))
	}
	if !o.Sync.Always && o.Sync.Interval < 0 {
		errs = append(errs, fmt.Errorf("natsembed: Sync.Interval %s: must be positive", o.Sync.Interval))
	}
	return errors.Join(errs...)
}

// Server is a running embedded nats-server.
type Server struct {
	ns *server.Server
}

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*Server, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	sopts := &server.Options{}
	if o.Config != "" {
		if err := sopts.ProcessConfigString(o.Config); err != nil {
			return nil, fmt.Errorf("natsembed: config: %w", err)
		}
	}
	sopts.Host = o.Host
	if sopts.Host == "" {
		sopts.Host = "127.0.0.1"
	}
	sopts.Port = o.Port
	if sopts.Port == 0 {
		sopts.Port = 4222
	}
	sopts.ServerName = o.ServerName
	if sopts.ServerName == "" {
		sopts.ServerName = "fleet"
	}
	sopts.JetStream = true
	sopts.StoreDir = o.StoreDir
	sync := o.Sync
	if sync == (SyncPolicy{}) {
		sync = DefaultSync
	}
	sopts.SyncAlways = sync.Always
	if sync.Interval > 0 {
		sopts.SyncInterval = sync.Interval
	}
	sopts.NoSigs = true
	sopts.Debug = o.Debug

	ns, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("natsembed: %w", err)
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ns.SetLoggerV2(slogAdapter{logger}, o.Debug, false, false)
	ns.Start()
	wait := o.ReadyTimeout
	if wait == 0 {
		wait = 10 * time.Second
	}
	if !ns.ReadyForConnections(wait) {
		ns.Shutdown()
		return nil, fmt.Errorf("natsembed: server not ready for connections after %s (store %s)", wait, o.StoreDir)
	}
	return &Server{ns: ns}, nil
}

// ClientURL is the URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// NATS returns the underlying server for advanced use (tests, monitoring).
func (s *Server) NATS() *server.Server { return s.ns }

// Shutdown stops the server and waits until it has stopped. Calling it more
// than once is harmless.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// Run starts a server with o, blocks until ctx ends, then shuts it down.
func Run(ctx context.Context, o Options) error {
	s, err := Start(o)
	if err != nil {
		return err
	}
	<-ctx.Done()
	s.Shutdown()
	return nil
}

// slogAdapter bridges nats-server's logger to slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(f string, v ...any) { a.l.Info(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Warnf(f string, v ...any)   { a.l.Warn(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Fatalf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Errorf(f string, v ...any)  { a.l.Error(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Debugf(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...)) }
func (a slogAdapter) Tracef(f string, v ...any)  { a.l.Debug(fmt.Sprintf(f, v...)) }

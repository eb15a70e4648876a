// Command fleet-authcallout runs Fleet's NATS auth callout (package
// authcallout): it verifies device id_tokens and issues user JWTs limited to
// the device's own subjects. Configuration: a JSON file (-config) with flags
// over it; secrets are read from the files the configuration names. See
// docs/security.md for the NATS server configuration it pairs with. With
// -metrics-addr host:port it serves its Prometheus metrics at /metrics.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lestrrat-go/jwx/v2/jwa"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/metrics"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "fleet-authcallout:", err)
		os.Exit(1)
	}
}

// run parses flags, wires the callout (and its metrics endpoint) and runs
// it until ctx ends.
func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("fleet-authcallout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "JSON configuration file (flags below override it)")
	var over authcallout.Config
	fs.StringVar(&over.NATSURL, "nats-url", "", "NATS server URL(s)")
	fs.StringVar(&over.CalloutUser, "callout-user", "", "auth_callout auth_users member in the callout account")
	fs.StringVar(&over.CalloutPasswordFile, "callout-password-file", "", "file holding the callout user's password")
	fs.StringVar(&over.ReaderUser, "reader-user", "", "user reading the fleet-identity bucket")
	fs.StringVar(&over.ReaderPasswordFile, "reader-password-file", "", "file holding the reader's password")
	fs.StringVar(&over.SystemUser, "system-user", "", "system-account user that may kick connections (live revocation; optional)")
	fs.StringVar(&over.SystemPasswordFile, "system-password-file", "", "file holding the system user's password")
	fs.StringVar(&over.IssuerSeedFile, "issuer-seed-file", "", "file holding the issuer account seed (SA...)")
	fs.StringVar(&over.XKeySeedFile, "xkey-seed-file", "", "file holding the curve seed (SX...) for the encrypted callout")
	fs.StringVar(&over.Account, "account", "", "control-plane account the operator role is placed in (default FLEET)")
	fs.StringVar(&over.DeviceAccount, "device-account", "", "account devices are placed in, JetStream disabled (default DEVICES)")
	fs.StringVar(&over.OIDCIssuer, "oidc-issuer", "", "expected id_token issuer")
	fs.StringVar(&over.Audience, "audience", "", "expected id_token audience (the Fleet project id)")
	fs.StringVar(&over.JWKSURL, "jwks-url", "", "JWKS URL (default: from discovery)")
	fs.StringVar(&over.LogFormat, "log-format", "", "json or text")
	fs.StringVar(&over.LogLevel, "log-level", "", "info or debug")
	metricsAddr := fs.String("metrics-addr", "0", "host:port of the Prometheus metrics endpoint, /metrics (0: off)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var cfg authcallout.Config
	if *configPath != "" {
		var err error
		if cfg, err = authcallout.LoadConfig(*configPath); err != nil {
			return err
		}
	}
	merge(&cfg, over)
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "metrics-addr" {
			cfg.MetricsAddr = *metricsAddr
		}
	})
	if cfg.Account == "" {
		cfg.Account = authcallout.AccountFleet
	}
	if cfg.DeviceAccount == "" {
		cfg.DeviceAccount = authcallout.AccountDevices
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := newLogger(stderr, cfg)

	calloutPw, err := authcallout.ReadSecretFile(cfg.CalloutPasswordFile, "callout password")
	if err != nil {
		return err
	}
	readerPw, err := authcallout.ReadSecretFile(cfg.ReaderPasswordFile, "reader password")
	if err != nil {
		return err
	}
	issuerSeed, err := authcallout.ReadSecretFile(cfg.IssuerSeedFile, "issuer seed")
	if err != nil {
		return err
	}
	issuer, err := nkeys.FromSeed([]byte(issuerSeed))
	if err != nil {
		return fmt.Errorf("issuer seed in %s is not an nkey seed", cfg.IssuerSeedFile)
	}
	var xkey nkeys.KeyPair
	if cfg.XKeySeedFile != "" {
		seed, err := authcallout.ReadSecretFile(cfg.XKeySeedFile, "xkey seed")
		if err != nil {
			return err
		}
		if xkey, err = nkeys.FromCurveSeed([]byte(seed)); err != nil {
			return fmt.Errorf("xkey seed in %s is not a curve seed (SX...)", cfg.XKeySeedFile)
		}
	}
	var systemPw string
	if cfg.SystemUser != "" {
		if systemPw, err = authcallout.ReadSecretFile(cfg.SystemPasswordFile, "system password"); err != nil {
			return err
		}
	}
	var algs []jwa.SignatureAlgorithm
	for _, a := range cfg.Algorithms {
		algs = append(algs, jwa.SignatureAlgorithm(a))
	}
	var m *authcallout.Metrics
	if cfg.MetricsAddr != "" && cfg.MetricsAddr != "0" {
		m = authcallout.NewMetrics()
	}
	replica, err := authcallout.Connect(authcallout.ReplicaOptions{
		URL: cfg.NATSURL, CalloutUser: cfg.CalloutUser, CalloutPassword: calloutPw, ReaderUser: cfg.ReaderUser, ReaderPassword: readerPw,
		SystemUser: cfg.SystemUser, SystemPassword: systemPw, Issuer: issuer, XKey: xkey,
		VerifierOptions: authcallout.VerifierOptions{
			Issuer: cfg.OIDCIssuer, Audience: cfg.Audience, JWKSURL: cfg.JWKSURL,
			Algorithms: algs, ClockSkew: time.Duration(cfg.ClockSkew),
		},
		Account: cfg.Account, DeviceAccount: cfg.DeviceAccount, QueueGroup: cfg.QueueGroup, Workers: cfg.Workers, ExpirySpread: cfg.ExpirySpread, Logger: log,
		Metrics: m,
	})
	if err != nil {
		return err
	}
	defer replica.Close()
	g, gctx := errgroup.WithContext(ctx)
	if m != nil {
		srv, err := serveMetrics(cfg.MetricsAddr, m)
		if err != nil {
			return err
		}
		log.Info("metrics serving", "addr", srv.Addr(), "path", metrics.Path)
		g.Go(func() error { return srv.Run(gctx) })
	}
	g.Go(func() error { return replica.Run(gctx) })
	return g.Wait()
}

// serveMetrics binds addr for the process's metrics and the callout's.
func serveMetrics(addr string, m *authcallout.Metrics) (*metrics.Server, error) {
	reg := metrics.NewRegistry()
	for _, c := range m.Collectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	return metrics.Listen(addr, map[string]prometheus.Gatherer{metrics.Path: reg})
}

func merge(c *authcallout.Config, o authcallout.Config) {
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&c.NATSURL, o.NATSURL)
	set(&c.CalloutUser, o.CalloutUser)
	set(&c.CalloutPasswordFile, o.CalloutPasswordFile)
	set(&c.ReaderUser, o.ReaderUser)
	set(&c.ReaderPasswordFile, o.ReaderPasswordFile)
	set(&c.SystemUser, o.SystemUser)
	set(&c.SystemPasswordFile, o.SystemPasswordFile)
	set(&c.IssuerSeedFile, o.IssuerSeedFile)
	set(&c.XKeySeedFile, o.XKeySeedFile)
	set(&c.Account, o.Account)
	set(&c.DeviceAccount, o.DeviceAccount)
	set(&c.OIDCIssuer, o.OIDCIssuer)
	set(&c.Audience, o.Audience)
	set(&c.JWKSURL, o.JWKSURL)
	set(&c.LogFormat, o.LogFormat)
	set(&c.LogLevel, o.LogLevel)
}

func newLogger(w io.Writer, c authcallout.Config) *slog.Logger {
	level := slog.LevelInfo
	if strings.EqualFold(c.LogLevel, "debug") {
		level = slog.LevelDebug
	}
	ho := &slog.HandlerOptions{Level: level}
	if c.LogFormat == "text" {
		return slog.New(slog.NewTextHandler(w, ho))
	}
	return slog.New(slog.NewJSONHandler(w, ho))
}

package controlplane

import (
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
)

// Options configure Start.
type Options struct {
	// StoreDir is the server's JetStream folder. Required; Start does not
	// create it. A plane started again on the same folder resumes it.
	StoreDir string
	// Host is the server's listen host. Default natsembed's (127.0.0.1).
	Host string
	// Port is the server's client port: -1 picks a free port, 0 means
	// natsembed's default (4222).
	Port int
	// ServerName names the server (stable across restarts on one
	// store). Default natsembed's ("fleet").
	ServerName string
	// Sync is the server's fsync policy. Zero: natsembed.DefaultSync.
	Sync natsembed.SyncPolicy
	// Servers, when set, are the client URLs of servers started elsewhere
	// (a cluster: internal/natscluster) with the configuration of
	// Secrets.ServerConfig: the plane starts no server (Server is nil,
	// StoreDir, Host, Port, ServerName and Sync are unused) and its parts
	// connect with every URL, so that they reconnect to a survivor when
	// one server goes. Secrets is then required.
	Servers []string

	// Logger receives the parts' logs, each with a "component" attribute
	// (nats, oidc, authcallout); the event store logs to it as it is.
	// Default: discard.
	Logger *slog.Logger
	// NATSLogLevel is the least level of the server's records passed to
	// Logger (fleet dev drops the start-up banner with slog.LevelWarn).
	// Zero: slog.LevelInfo.
	NATSLogLevel slog.Level

	// Secrets are the callout users' passwords and the issuer and xkey
	// key pairs. Nil: generated (NewSecrets), kept in memory only.
	Secrets *Secrets
	// Config is the server configuration text. Default:
	// authcallout.ServerConfigWith of Secrets and StaticUser (the
	// documented text, its variables defined in front of it). When set,
	// it must give the callout users the passwords and keys Secrets holds
	// (by its own definitions or from the environment, as production
	// does).
	Config string
	// StaticUser adds a user of the whole FLEET account that bypasses the
	// callout to the default configuration (fleet dev's nats CLI user, the
	// benchmark's floor clients). Only without Config.
	StaticUser *authcallout.StaticUser
	// Plain drops the xkey: the configuration's xkey line is removed and
	// the callout gets plain requests (tests of the callout itself).
	Plain bool

	// ProviderListener, when set, is where the development OpenID
	// Provider serves (default: a free loopback port); the plane owns it
	// from Start on. ProviderIssuer is its issuer URL (default
	// http://<listener address>): the URL the callout, the devices and the
	// OpenBao stand-in reach it at, and the iss of its id_tokens.
	ProviderListener net.Listener
	ProviderIssuer   string
	// ProviderAdminToken enables the provider's management API (the part
	// of Zitadel's that `fleet enroll` uses) for bearers of this token.
	// Empty: the management API refuses every request.
	ProviderAdminToken string
	// ProviderStateFile, when set, keeps the provider's machine users and
	// their public keys across restarts (devop.Options.StateFile): fleet
	// dev's devices, and those attached to it, survive its restart.
	ProviderStateFile string
	// SigningKey is the provider's initial RS256 key. Default: generated.
	SigningKey *rsa.PrivateKey
	// TokenLifetime of the provider's id_tokens. Zero: devop's default.
	TokenLifetime time.Duration
	// MinKeyRefresh is the verifier's least time between two JWKS fetches
	// forced by an unknown kid. Zero: the production default.
	MinKeyRefresh time.Duration
	// Replicas is the number of callout replicas (one queue group), each
	// with its own connections; they share one Verifier. Default 1.
	Replicas int
	// ExternalCallout, with Servers, runs no callout replica in the plane:
	// the callout runs elsewhere (fleet-authcallout processes the chaos run
	// kills), started before Start with the provider's issuer
	// (ProviderListener, ProviderIssuer) and Secrets, and Start's own
	// connections (the operator's) are answered by it.
	ExternalCallout bool
	// CalloutMetrics, when set, records what the callout replicas and
	// their Verifier do (fleet_authcallout_*).
	CalloutMetrics *authcallout.Metrics

	// Provision configures the Fleet streams and buckets.
	Provision events.ProvisionOptions
}

// Validate checks the options.
func (o Options) Validate() error {
	var errs []error
	if o.StoreDir == "" && len(o.Servers) == 0 {
		errs = append(errs, errors.New("controlplane: StoreDir is empty: give the JetStream folder"))
	}
	if o.Port < -1 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("controlplane: Port %d: use -1 (any free port) or 0..65535", o.Port))
	}
	if o.Config != "" && o.StaticUser != nil {
		errs = append(errs, errors.New("controlplane: StaticUser goes into the default configuration: with Config, put the user there"))
	}
	if len(o.Servers) > 0 && (o.Secrets == nil || o.Plain || o.Config != "") {
		errs = append(errs, errors.New("controlplane: Servers needs Secrets (the servers run Secrets.ServerConfig) and neither Plain nor Config"))
	}
	if o.ExternalCallout && (len(o.Servers) == 0 || o.Replicas != 0) {
		errs = append(errs, errors.New("controlplane: ExternalCallout needs Servers and no Replicas: the callout runs elsewhere"))
	}
	if o.Replicas < 0 {
		errs = append(errs, fmt.Errorf("controlplane: Replicas %d is negative", o.Replicas))
	}
	if o.TokenLifetime < 0 || o.MinKeyRefresh < 0 {
		errs = append(errs, errors.New("controlplane: TokenLifetime and MinKeyRefresh must not be negative"))
	}
	if o.Secrets != nil {
		if err := o.Secrets.validate(o.Plain); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

package agent

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/identity/credential"
)

// ConnectOptions say how a device connects to NATS: with its machine key,
// through the auth callout, as every device does. The fleet-agent binary,
// fleet dev's devices and the scale benchmark's devices all use Connect.
type ConnectOptions struct {
	// URL is the NATS server's URL. Required.
	URL string
	// Key is the device's machine key (credential.ReadKeyFile). Required
	// unless Source is set.
	Key *credential.KeyFile
	// Device is the device's id. Default: the key file's.
	Device string
	// Issuer and Audience of the OpenID Provider. Default: the key file's.
	Issuer, Audience string
	// Source, when set, is an id_token source made earlier for this device
	// (one kept across retried connects costs the provider nothing more);
	// Key, Issuer and Audience are then unused.
	Source *credential.Source
	// HTTPClient reaches the provider. Default: credential's.
	HTTPClient *http.Client
	// Logger receives the credential source's logs. Default: discard.
	Logger *slog.Logger
	// NATSOptions are added after the device's own (name, token callback,
	// inbox prefix, reconnecting forever after ReconnectDelay, a reconnect
	// buffer of ReconnectBuffer bytes); a later
	// option wins (nats.ReconnectWait does not: a custom delay replaces it;
	// give nats.CustomReconnectDelay).
	NATSOptions []nats.Option
}

// How a device reconnects: the first attempt after DefaultReconnectWait
// plus a random jitter of up to DefaultReconnectJitter, so that a fleet that
// lost its server together does not come back in one instant and overload
// the auth callout (docs/security.md sizes it: devices ÷ connects per
// second); each further failed attempt doubles both, up to
// MaxReconnectWait and MaxReconnectWait of jitter (ReconnectDelay), so
// that devices the callout refuses while it is overloaded come back ever
// more slowly instead of keeping it overloaded.
const (
	DefaultReconnectWait   = 2 * time.Second
	DefaultReconnectJitter = 5 * time.Second
	MaxReconnectWait       = time.Minute
)

// ReconnectDelay is how long a device waits before reconnect attempt
// attempt (1, 2, …, counted from the loss of the connection): a uniformly
// random time in [w, w+j], where w is DefaultReconnectWait and j
// DefaultReconnectJitter, both doubled for every earlier failed attempt and
// each capped at MaxReconnectWait: 2–7 s, 4–14 s, 8–28 s, 16–56 s, 32–92 s,
// then 60–120 s.
func ReconnectDelay(attempt int) time.Duration {
	w, j := DefaultReconnectWait, DefaultReconnectJitter
	for i := 1; i < attempt && (w < MaxReconnectWait || j < MaxReconnectWait); i++ {
		w, j = min(2*w, MaxReconnectWait), min(2*j, MaxReconnectWait)
	}
	return w + rand.N(j+1)
}

// ReconnectBuffer is how many bytes a device's NATS client keeps of what
// is published while its connection is down, for the reconnect (nats.go's
// default is 8 MiB); past it a publish fails with
// nats.ErrReconnectBufExceeded. The agent holds its reports itself while
// offline (coalesced, MaxOfflineReports), so the client's buffer only
// catches a publish racing the disconnect and log chunks: eight of the
// largest message a device may send (authcallout.DeviceMaxPayload).
const ReconnectBuffer = 1 << 20

// DeviceConn is a device's NATS connection and the id_token source it
// authenticates with (the agent's secret store logs in with the same
// id_tokens).
type DeviceConn struct {
	// Device is the device's id.
	Device string
	// Conn is the connection; Close closes it.
	Conn *nats.Conn
	// Source makes the device's id_tokens.
	Source *credential.Source
}

// Close closes the connection.
func (d *DeviceConn) Close() { d.Conn.Close() }

// Connect makes the device's id_token source from its machine key (unless
// o.Source is given) and connects to NATS with it: the connection is named
// "fleet-agent <device>", uses the device's inbox prefix (the auth callout
// allows no other) and reconnects forever with a jittered wait, presenting
// a fresh id_token each time.
//
// Connect does not need the network: a device that boots offline gets a
// connection that is still connecting (nats.RetryOnFailedConnect), and
// the provider's discovery document is read by the first grant when it
// cannot be read now (credential.Options.DeferDiscovery). Refused
// connects (the provider or the callout answering no) are retried too
// (nats.IgnoreAuthErrorAbort): nothing transient ends the agent, so
// systemd never loops restarting it. Only a bad key or option is an
// error.
//
// The connection's errors, disconnects and reconnects are logged to
// o.Logger as structured records (never to stderr as text, nats.go's
// default). A refused connect (the callout answering "authorization
// violation": an id_token it no longer accepts, for instance one signed by
// a provider that restarted) drops the cached id_token, so the next
// attempt, after ReconnectDelay, presents a fresh grant's.
func Connect(ctx context.Context, o ConnectOptions) (*DeviceConn, error) {
	if o.URL == "" {
		return nil, errors.New("agent: connect: the NATS URL is empty: give the server's URL")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	sessions := tls.NewLRUClientSessionCache(tlsSessions)
	if o.HTTPClient == nil {
		o.HTTPClient = providerClient(sessions)
	}
	src := o.Source
	if src == nil {
		if o.Key == nil {
			return nil, errors.New("agent: connect: no machine key: a device authenticates with its key file")
		}
		o.Device = cmp.Or(o.Device, o.Key.Device)
		issuer := cmp.Or(o.Issuer, o.Key.Issuer)
		if issuer == "" {
			return nil, errors.New("agent: connect: the issuer is empty and the key file names none: give the OpenID Provider's issuer URL")
		}
		var err error
		src, err = credential.New(ctx, credential.Options{Issuer: issuer, Key: *o.Key, Audience: cmp.Or(o.Audience, o.Key.Audience),
			HTTPClient: o.HTTPClient, Logger: o.Logger, DeferDiscovery: true})
		if err != nil {
			return nil, fmt.Errorf("agent: connect: %w", err)
		}
	}
	if o.Device == "" {
		return nil, errors.New("agent: connect: the device id is empty and the key file names none: give the device's id")
	}
	opts := append(src.NATSOptions(o.Device), nats.Name("fleet-agent "+o.Device), nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true), nats.IgnoreAuthErrorAbort(), nats.CustomReconnectDelay(ReconnectDelay),
		nats.ReconnectBufSize(ReconnectBuffer))
	opts = append(opts, connLogging(o.Logger.With("device", o.Device), src)...)
	// Last: it keeps a TLS configuration the caller gave, adding the
	// session cache.
	nc, err := nats.Connect(o.URL, append(append(opts, o.NATSOptions...), resumeTLS(sessions))...)
	if err != nil {
		return nil, fmt.Errorf("agent: connect device %s to NATS at %s: %w", o.Device, o.URL, err)
	}
	return &DeviceConn{Device: o.Device, Conn: nc, Source: src}, nil
}

// connLogging are the nats.go callbacks of a device connection: every
// error, disconnect and reconnect is a structured record on log (nats.go
// would print errors to stderr as text), and a refused connect drops the
// source's cached id_token so that the next attempt makes a new grant.
func connLogging(log *slog.Logger, src *credential.Source) []nats.Option {
	refused := func(err error, what string) {
		if isAuthError(err) {
			src.Invalidate()
			log.Warn(what+": NATS refused the device (the auth callout did not accept its id_token); retrying with a new id_token after the reconnect delay",
				"err", err,
				"fix", "if it persists, check that the device is enrolled and not quarantined (kubectl get fdev), and that the key file's issuer is the provider the callout trusts; a device enrolled with a development provider that lost its state must be enrolled again")
			return
		}
		log.Warn(what+": retrying after the reconnect delay", "err", err)
	}
	return []nats.Option{
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			if sub != nil {
				log.Warn("NATS subscription error", "subject", sub.Subject, "err", err)
				return
			}
			refused(err, "NATS connection error")
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				refused(err, "NATS connect attempt failed")
			}
		}),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("disconnected from NATS; reconnecting", "err", err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("connected to NATS", "url", nc.ConnectedUrlRedacted())
		}),
	}
}

// isAuthError reports whether err is the server refusing the connection's
// credentials.
func isAuthError(err error) bool {
	for _, e := range []error{nats.ErrAuthorization, nats.ErrAuthExpired, nats.ErrAuthRevoked, nats.ErrAccountAuthExpired} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

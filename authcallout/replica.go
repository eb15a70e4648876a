package authcallout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// The users of ServerConfig that bypass the callout, by their documented
// names: the defaults of ReplicaOptions.
const (
	// DefaultCalloutUser answers $SYS.REQ.USER.AUTH in the account AUTH.
	DefaultCalloutUser = "fleet-authcallout"
	// DefaultReaderUser reads and follows fleet-identity in FLEET.
	DefaultReaderUser = "fleet-identity-reader"
	// DefaultSystemUser kicks connections in SYS (live revocation).
	DefaultSystemUser = "fleet-authcallout-sys"
	// PresenceUser follows the device account's connect and disconnect
	// events and lists its connections in SYS: the operator's view of
	// which devices are connected (ADR 0032).
	PresenceUser = "fleet-presence"
)

// ReplicaOptions configure Connect: the connections and the Service of one
// callout replica. Passwords and seeds are never logged nor put in errors.
type ReplicaOptions struct {
	// URL is the NATS server (or comma-separated cluster URLs). Required.
	URL string
	// CalloutUser is an auth_callout.auth_users member of the callout
	// account. Default DefaultCalloutUser.
	CalloutUser string
	// CalloutPassword is CalloutUser's password. Required.
	CalloutPassword string
	// ReaderUser reads fleet-identity; it connects with the inbox prefix
	// InboxPrefix(ReaderUser). Default DefaultReaderUser.
	ReaderUser string
	// ReaderPassword is ReaderUser's password. Required.
	ReaderPassword string
	// SystemUser is a system-account user allowed $SYS.REQ.SERVER.*.KICK;
	// it connects with the inbox prefix InboxPrefix(SystemUser). Default
	// DefaultSystemUser.
	SystemUser string
	// SystemPassword is SystemUser's password. Optional: when set, the
	// replica revokes live connections (the reader then follows
	// fleet-identity); when empty, SystemUser is not connected.
	SystemPassword string
	// Issuer and XKey are Options.Issuer and Options.XKey.
	Issuer, XKey nkeys.KeyPair
	// Verifier checks id_tokens, shared with other replicas of the same
	// process. Default: NewVerifier(VerifierOptions).
	Verifier *Verifier
	// VerifierOptions make the Verifier when Verifier is nil (with
	// Metrics when VerifierOptions.Metrics is nil).
	VerifierOptions VerifierOptions
	// Account, DeviceAccount, QueueGroup, Workers, ExpirySpread and
	// Logger are the Options fields of the same names.
	Account, DeviceAccount, QueueGroup string
	Workers                            int
	ExpirySpread                       float64
	Logger                             *slog.Logger
	// Metrics is Options.Metrics, and the made Verifier's metrics (a
	// given Verifier keeps its own). Optional.
	Metrics *Metrics
}

// Validate checks the options that Connect needs before it connects; New
// checks the rest.
func (o ReplicaOptions) Validate() error {
	var errs []error
	if o.URL == "" {
		errs = append(errs, errors.New("authcallout: ReplicaOptions.URL is empty: give the NATS server URL"))
	}
	if o.CalloutPassword == "" {
		errs = append(errs, errors.New("authcallout: ReplicaOptions.CalloutPassword is empty"))
	}
	if o.ReaderPassword == "" {
		errs = append(errs, errors.New("authcallout: ReplicaOptions.ReaderPassword is empty"))
	}
	if o.Issuer == nil {
		errs = append(errs, errors.New("authcallout: ReplicaOptions.Issuer is nil: give the issuer account key pair"))
	}
	return errors.Join(errs...)
}

// Replica is one running unit of the callout: its connections and its
// Service. Run serves it; Close closes the connections Connect made.
type Replica struct {
	svc      *Service
	verifier *Verifier
	conns    []*nats.Conn // in the order made
}

// Connect makes the connections of one replica (the callout user; the
// reader, inbox prefix InboxPrefix(ReaderUser); with SystemPassword the
// system user, inbox prefix InboxPrefix(SystemUser)), each reconnecting
// forever, and the Service on them. On an error it closes what it opened.
func Connect(o ReplicaOptions) (*Replica, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	o.CalloutUser = cmp.Or(o.CalloutUser, DefaultCalloutUser)
	o.ReaderUser = cmp.Or(o.ReaderUser, DefaultReaderUser)
	o.SystemUser = cmp.Or(o.SystemUser, DefaultSystemUser)
	r := &Replica{verifier: o.Verifier}
	if r.verifier == nil {
		vo := o.VerifierOptions
		vo.Metrics = cmp.Or(vo.Metrics, o.Metrics)
		var err error
		if r.verifier, err = NewVerifier(vo); err != nil {
			return nil, err
		}
	}
	if err := r.start(o); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// start makes the connections and the Service; Connect closes the
// connections when it fails.
func (r *Replica) start(o ReplicaOptions) error {
	callout, err := r.connect(o.URL, o.CalloutUser, o.CalloutPassword, nats.Name("fleet-authcallout"))
	if err != nil {
		return err
	}
	reader, err := r.connect(o.URL, o.ReaderUser, o.ReaderPassword, nats.Name("fleet-authcallout-reader"),
		nats.CustomInboxPrefix(InboxPrefix(o.ReaderUser)))
	if err != nil {
		return err
	}
	var system, watch *nats.Conn
	if o.SystemPassword != "" {
		if system, err = r.connect(o.URL, o.SystemUser, o.SystemPassword, nats.Name("fleet-authcallout-sys"),
			nats.CustomInboxPrefix(InboxPrefix(o.SystemUser))); err != nil {
			return err
		}
		watch = reader
	}
	js, err := jetstream.New(reader)
	if err != nil {
		return fmt.Errorf("authcallout: jetstream on %s: %w", o.ReaderUser, err)
	}
	r.svc, err = New(Options{
		Conn: callout, Issuer: o.Issuer, XKey: o.XKey, Account: o.Account, DeviceAccount: o.DeviceAccount, Verifier: r.verifier,
		Identities: NewKVIdentities(js), Watch: watch, System: system, QueueGroup: o.QueueGroup, Workers: o.Workers, ExpirySpread: o.ExpirySpread, Logger: o.Logger,
		Metrics: o.Metrics,
	})
	return err
}

// connect connects as user, reconnecting forever every second.
func (r *Replica) connect(url, user, password string, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(url, append([]nats.Option{nats.UserInfo(user, password), nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("authcallout: connect as %s: %w", user, err)
	}
	r.conns = append(r.conns, nc)
	return nc, nil
}

// Service is the replica's Service.
func (r *Replica) Service() *Service { return r.svc }

// Verifier is the replica's Verifier (ReplicaOptions.Verifier when given).
func (r *Replica) Verifier() *Verifier { return r.verifier }

// Run serves the replica until ctx ends (Service.Run).
func (r *Replica) Run(ctx context.Context) error { return r.svc.Run(ctx) }

// Ready is closed once Run's subscription is registered (Service.Ready).
func (r *Replica) Ready() <-chan struct{} { return r.svc.Ready() }

// Close closes the connections Connect made, in reverse order; call it
// after Run returned. Calling it more than once is harmless.
func (r *Replica) Close() {
	for i := len(r.conns) - 1; i >= 0; i-- {
		r.conns[i].Close()
	}
	r.conns = nil
}

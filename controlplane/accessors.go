package controlplane

import (
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/controlplane/natsembed"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/devop"
)

// URL is the server's client URL; with Options.Servers, those URLs
// comma-separated (as nats.Connect takes them).
func (p *Plane) URL() string {
	if p.server == nil {
		return strings.Join(p.o.Servers, ",")
	}
	return p.server.ClientURL()
}

// Server is the embedded server (nil with Options.Servers).
func (p *Plane) Server() *natsembed.Server { return p.server }

// Config is the server configuration text the plane runs.
func (p *Plane) Config() string { return p.conf }

// Provider is the development OpenID Provider.
func (p *Plane) Provider() *devop.Provider { return p.provider }

// Verifier is the callout replicas' id_token verifier.
func (p *Plane) Verifier() *authcallout.Verifier { return p.verifier }

// Issuer is the key pair that signs the callout's user JWTs.
func (p *Plane) Issuer() nkeys.KeyPair { return p.secrets.Issuer }

// XKey is the key pair the callout's requests are encrypted to; nil with
// Options.Plain.
func (p *Plane) XKey() nkeys.KeyPair { return p.secrets.XKey }

// Operator is the operator's connection (role fleet-operator, through the
// callout); Store, Intent and Identity are on it.
func (p *Plane) Operator() *nats.Conn { return p.operator }

// Store appends and reads events on the operator's connection.
func (p *Plane) Store() *events.Store { return p.store }

// Intent is the fleet-intent bucket.
func (p *Plane) Intent() jetstream.KeyValue { return p.intent }

// Identity is the fleet-identity bucket.
func (p *Plane) Identity() jetstream.KeyValue { return p.identity }

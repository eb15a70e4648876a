package controlplane

import (
	"context"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/nationtech/harmony-fleet/authcallout"
	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/identity/credential"
)

// connectTimeout bounds one connect of a plane client, callout included.
const connectTimeout = 10 * time.Second

// Machine creates a machine user name with roles and a key at the
// provider, and returns its token source.
func (p *Plane) Machine(ctx context.Context, name string, roles ...string) (*credential.Source, error) {
	uid, err := p.provider.CreateMachineUser(ctx, name, roles...)
	if err != nil {
		return nil, fmt.Errorf("controlplane: machine user %s: %w", name, err)
	}
	kf, err := p.provider.AddMachineKey(ctx, uid, time.Time{})
	if err != nil {
		return nil, fmt.Errorf("controlplane: machine key of %s: %w", name, err)
	}
	src, err := credential.New(ctx, credential.Options{Issuer: p.provider.Issuer(), Key: kf, Audience: p.provider.Audience()})
	if err != nil {
		return nil, fmt.Errorf("controlplane: token source of %s: %w", name, err)
	}
	return src, nil
}

// ConnectAs connects src's identity through the callout as the client
// name: its token callback (a fresh id_token on every reconnect) and the
// inbox prefix of its subject, reconnecting forever; opts come last. Close
// closes the connection.
func (p *Plane) ConnectAs(src *credential.Source, name string, opts ...nats.Option) (*nats.Conn, error) {
	return p.connect(name, append([]nats.Option{nats.TokenHandler(src.TokenHandler(0)),
		nats.CustomInboxPrefix(authcallout.InboxPrefix(src.Subject()))}, opts...)...)
}

// ConnectMachine creates a machine user name with roles (Machine) and
// connects it (ConnectAs): a control-plane identity with
// authcallout.RoleOperator.
func (p *Plane) ConnectMachine(ctx context.Context, name string, roles ...string) (*nats.Conn, error) {
	src, err := p.Machine(ctx, name, roles...)
	if err != nil {
		return nil, err
	}
	return p.ConnectAs(src, name)
}

// ConnectPresence connects the system-account user fleet-presence
// (authcallout.PresenceUser): the operator's view of device connections
// (ADR 0032). Close closes the connection.
func (p *Plane) ConnectPresence() (*nats.Conn, error) {
	return p.connect(authcallout.PresenceUser, nats.UserInfo(authcallout.PresenceUser, p.secrets.PresencePassword),
		nats.CustomInboxPrefix(authcallout.InboxPrefix(authcallout.PresenceUser)))
}

// connect connects a client named name, reconnecting forever; Close
// closes it.
func (p *Plane) connect(name string, opts ...nats.Option) (*nats.Conn, error) {
	nc, err := nats.Connect(p.URL(), append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1),
		nats.Timeout(connectTimeout)}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("controlplane: connect %s: %w", name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		nc.Close()
		return nil, fmt.Errorf("controlplane: connect %s: %w", name, errClosed)
	}
	p.conns = append(p.conns, nc)
	return nc, nil
}

// EnrollDevice enrolls device as the tests and the benchmark do without
// Kubernetes: a machine user "device-<device>" and a key at the provider,
// the fleet-identity entry the operator would project from the Device
// resource, and the key file at path (mode 0600, with the issuer, audience
// and device as `fleet enroll` writes them). It returns the identity
// subject.
func (p *Plane) EnrollDevice(ctx context.Context, device, path string) (string, error) {
	return p.enrollDevice(ctx, device, path, nil)
}

// EnrollDeviceWithKey is EnrollDevice with a key the caller generated: the
// provider keeps its public half (as Zitadel's AddMachineKey with a public
// key does) and the key file holds key. The scale benchmark uses it to
// reuse cached keys instead of generating one RSA key per device per run.
func (p *Plane) EnrollDeviceWithKey(ctx context.Context, device, path string, key *rsa.PrivateKey) (string, error) {
	if key == nil {
		return "", fmt.Errorf("controlplane: enroll %s: no key given", device)
	}
	return p.enrollDevice(ctx, device, path, key)
}

func (p *Plane) enrollDevice(ctx context.Context, device, path string, key *rsa.PrivateKey) (string, error) {
	uid, err := p.provider.CreateMachineUser(ctx, "device-"+device)
	if err != nil {
		return "", fmt.Errorf("controlplane: enroll %s: %w", device, err)
	}
	var kf credential.KeyFile
	if key == nil {
		kf, err = p.provider.AddMachineKey(ctx, uid, time.Time{})
	} else {
		kf, err = p.provider.AddMachinePublicKey(ctx, uid, &key.PublicKey, time.Time{})
	}
	if err != nil {
		return "", fmt.Errorf("controlplane: enroll %s: %w", device, err)
	}
	if key != nil {
		kf.Key = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	}
	v, err := events.IdentityEntry{Device: device}.Encode()
	if err != nil {
		return "", fmt.Errorf("controlplane: enroll %s: %w", device, err)
	}
	ik, err := events.IdentityKey(uid)
	if err != nil {
		return "", fmt.Errorf("controlplane: enroll %s: %w", device, err)
	}
	if _, err := p.identity.Put(ctx, ik, v); err != nil {
		return "", fmt.Errorf("controlplane: enroll %s: identity: %w", device, err)
	}
	kf.Issuer, kf.Audience, kf.Device = p.provider.Issuer(), p.provider.Audience(), device
	if err := credential.WriteKeyFile(path, kf); err != nil {
		return "", fmt.Errorf("controlplane: enroll %s: %w", device, err)
	}
	return uid, nil
}

package devop

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"slices"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/nationtech/harmony-fleet/identity/credential"
)

// machineUser is a Zitadel machine user: an id, a name, roles and public
// keys.
type machineUser struct {
	id    string
	name  string
	roles []string
	keys  map[string]machineKey // by key id
}

type machineKey struct {
	pub     *rsa.PublicKey
	expires time.Time // zero: never
}

// MachineUser describes a machine user (no key material).
type MachineUser struct {
	// ID is the user id: the sub claim of its tokens.
	ID string
	// Name is the user name given at creation.
	Name string
	// Roles are the project roles asserted in its id_tokens.
	Roles []string
	// KeyIDs are the ids of its current keys, sorted.
	KeyIDs []string
}

func newID() string {
	var b [9]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return hex.EncodeToString(b[:])
}

// CreateMachineUser adds a machine user with the given name and roles and
// returns its id. Names are unique: creating an existing name returns that
// user's id (and replaces its roles).
func (p *Provider) CreateMachineUser(_ context.Context, name string, roles ...string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("devop: CreateMachineUser: name is empty")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if id, ok := p.userNames[name]; ok {
		u := p.users[id]
		old := u.roles
		u.roles = slices.Clone(roles)
		if err := p.saveLocked(); err != nil {
			u.roles = old
			return "", err
		}
		return u.id, nil
	}
	u := &machineUser{id: newID(), name: name, roles: slices.Clone(roles), keys: map[string]machineKey{}}
	p.users[u.id] = u
	p.userNames[name] = u.id
	if err := p.saveLocked(); err != nil {
		delete(p.users, u.id)
		delete(p.userNames, name)
		return "", err
	}
	return u.id, nil
}

// SetRoles replaces a user's roles (a machine or a human user).
func (p *Provider) SetRoles(_ context.Context, userID string, roles ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u, ok := p.users[userID]; ok {
		old := u.roles
		u.roles = slices.Clone(roles)
		if err := p.saveLocked(); err != nil {
			u.roles = old
			return err
		}
		return nil
	}
	if u, ok := p.humans[userID]; ok {
		u.roles = slices.Clone(roles)
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnknownUser, userID)
}

// RemoveMachineUser deletes a user and its keys: no new token is issued for
// it. Removing an unknown user is not an error.
func (p *Provider) RemoveMachineUser(_ context.Context, userID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u, ok := p.users[userID]; ok {
		delete(p.userNames, u.name)
		delete(p.users, userID)
		if err := p.saveLocked(); err != nil {
			p.users[userID], p.userNames[u.name] = u, userID
			return err
		}
	}
	return nil
}

// User returns a machine user.
func (p *Provider) User(_ context.Context, userID string) (MachineUser, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.users[userID]
	if !ok {
		return MachineUser{}, fmt.Errorf("%w: %s", ErrUnknownUser, userID)
	}
	mu := MachineUser{ID: u.id, Name: u.name, Roles: slices.Clone(u.roles)}
	for id := range u.keys {
		mu.KeyIDs = append(mu.KeyIDs, id)
	}
	slices.Sort(mu.KeyIDs)
	return mu, nil
}

// AddMachineKey generates an RSA key for the user, keeps its public half and
// returns the key file (private key included) exactly once, as Zitadel does.
// A zero expires means the key never expires.
func (p *Provider) AddMachineKey(ctx context.Context, userID string, expires time.Time) (credential.KeyFile, error) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return credential.KeyFile{}, fmt.Errorf("devop: generate machine key: %w", err)
	}
	kf, err := p.AddMachinePublicKey(ctx, userID, &priv.PublicKey, expires)
	if err != nil {
		return credential.KeyFile{}, err
	}
	kf.Key = string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(priv)}))
	return kf, nil
}

// AddMachinePublicKey registers a public key the caller generated (Zitadel's
// AddMachineKey with public_key set): the private key never reaches the
// provider, and the returned key file carries the key id and user id but no
// key; the caller adds its private key. The key must be RSA of at least
// 2048 bits. A zero expires means the key never expires.
func (p *Provider) AddMachinePublicKey(_ context.Context, userID string, pub *rsa.PublicKey, expires time.Time) (credential.KeyFile, error) {
	if pub == nil || pub.N == nil || pub.N.BitLen() < 2048 {
		return credential.KeyFile{}, fmt.Errorf("%w: the public key must be RSA of at least 2048 bits", ErrBadKey)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.users[userID]
	if !ok {
		return credential.KeyFile{}, fmt.Errorf("%w: %s", ErrUnknownUser, userID)
	}
	kid := newID()
	u.keys[kid] = machineKey{pub: pub, expires: expires}
	if err := p.saveLocked(); err != nil {
		delete(u.keys, kid)
		return credential.KeyFile{}, err
	}
	return credential.KeyFile{Type: credential.KeyTypeServiceAccount, KeyID: kid, UserID: userID}, nil
}

// RemoveMachineKey revokes a key: grants signed with it are refused from now
// on. id_tokens issued before stay valid until they expire (as with
// Zitadel); keep TokenLifetime short.
func (p *Provider) RemoveMachineKey(_ context.Context, userID, keyID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.users[userID]
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownUser, userID)
	}
	k, ok := u.keys[keyID]
	if !ok {
		return fmt.Errorf("%w: %s of user %s", ErrUnknownKey, keyID, userID)
	}
	delete(u.keys, keyID)
	if err := p.saveLocked(); err != nil {
		u.keys[keyID] = k
		return err
	}
	return nil
}

// ListMachineKeys returns the ids of a user's keys, sorted.
func (p *Provider) ListMachineKeys(ctx context.Context, userID string) ([]string, error) {
	u, err := p.User(ctx, userID)
	return u.KeyIDs, err
}

// publicKey returns a user's key for the JWT-profile verifier.
func (p *Provider) publicKey(keyID, userID string) (*jose.JSONWebKey, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.users[userID]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownUser, userID)
	}
	k, ok := u.keys[keyID]
	if !ok || (!k.expires.IsZero() && p.now().After(k.expires)) {
		return nil, fmt.Errorf("%w: %s of user %s", ErrUnknownKey, keyID, userID)
	}
	return &jose.JSONWebKey{Key: k.pub, KeyID: keyID, Algorithm: string(jose.RS256), Use: "sig"}, nil
}

func (p *Provider) rolesOf(userID string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u, ok := p.users[userID]; ok {
		return slices.Clone(u.roles)
	}
	if u, ok := p.humans[userID]; ok {
		return slices.Clone(u.roles)
	}
	return nil
}

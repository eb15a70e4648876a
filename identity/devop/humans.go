package devop

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// humanEmailDomain is the domain of every human user's email address: a
// reserved name (RFC 2606), so no mail can ever go anywhere.
const humanEmailDomain = "fleet.dev.invalid"

// humanUser is a Zitadel human user that signs in with a password. Only the
// password's bcrypt hash is kept.
type humanUser struct {
	id       string
	name     string
	roles    []string
	passHash []byte
}

func (u *humanUser) email() string { return u.name + "@" + humanEmailDomain }

// CreateHumanUser adds a human user who signs in on the provider's login
// page with name and password, and returns its id. name is also the user's
// preferred_username and name claims, and <name>@fleet.dev.invalid its email.
// roles are asserted in its id_tokens exactly as for machine users
// (RolesClaim). Names are unique: creating an existing human name returns
// that user's id and replaces its password and roles; a machine user's name
// is refused. The password is kept only as a bcrypt hash and never logged.
func (p *Provider) CreateHumanUser(_ context.Context, name, password string, roles ...string) (string, error) {
	if name == "" {
		return "", errors.New("devop: CreateHumanUser: name is empty")
	}
	if password == "" {
		return "", errors.New("devop: CreateHumanUser: password is empty")
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		// bcrypt's only input error is a password over 72 bytes; its
		// message does not contain the password.
		return "", fmt.Errorf("devop: CreateHumanUser: password: %w", err)
	}
	if _, ok := p.userByName(name); ok {
		return "", fmt.Errorf("devop: CreateHumanUser: name %q is a machine user's", name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, u := range p.humans {
		if u.name == name {
			u.roles = slices.Clone(roles)
			u.passHash = hash
			return u.id, nil
		}
	}
	u := &humanUser{id: newID(), name: name, roles: slices.Clone(roles), passHash: hash}
	p.humans[u.id] = u
	return u.id, nil
}

// RemoveHumanUser deletes a human user: it can no longer sign in, and its
// access tokens no longer answer at userinfo. Removing an unknown user is
// not an error.
func (p *Provider) RemoveHumanUser(_ context.Context, userID string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.humans, userID)
	for id, t := range p.tokens {
		if t.subject == userID {
			delete(p.tokens, id)
		}
	}
	return nil
}

// dummyHash is compared against when the user name is unknown, so that an
// unknown name costs as much as a wrong password (no user enumeration by
// timing).
var dummyHash = sync.OnceValue(func() []byte {
	h, err := bcrypt.GenerateFromPassword([]byte("devop: no such user"), bcrypt.DefaultCost)
	if err != nil {
		panic(err) // a constant short password never fails
	}
	return h
})

// checkPassword returns the id of the human user with that name and
// password; ok is false for an unknown name or a wrong password alike.
func (p *Provider) checkPassword(name, password string) (id string, ok bool) {
	p.mu.Lock()
	var hash []byte
	for _, u := range p.humans {
		if subtle.ConstantTimeCompare([]byte(u.name), []byte(name)) == 1 {
			id, hash = u.id, u.passHash
		}
	}
	p.mu.Unlock()
	if hash == nil {
		_ = bcrypt.CompareHashAndPassword(dummyHash(), []byte(password))
		return "", false
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil {
		return "", false
	}
	return id, true
}

// human returns a copy of a human user's claims-relevant fields.
func (p *Provider) human(userID string) (humanUser, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.humans[userID]
	if !ok {
		return humanUser{}, false
	}
	return humanUser{id: u.id, name: u.name, roles: slices.Clone(u.roles)}, true
}

// secretDigest is how a web client's secret is kept: its SHA-256, compared
// in constant time. Client secrets are machine-generated configuration, not
// human passwords, so no slow hash is needed to keep the plain secret out
// of the provider's memory.
func secretDigest(secret string) [sha256.Size]byte { return sha256.Sum256([]byte(secret)) }

package devop

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"
)

// stateNote heads every state file: what it is and that nothing in
// production reads it.
const stateNote = "Harmony Fleet development OpenID Provider (fleet dev): machine users and their public keys. Development only: production uses Zitadel. Holds no private key."

// stateVersion is the state file's format version.
const stateVersion = 1

// state is the state file (Options.StateFile): the machine users with
// their roles and public keys. Human users, web clients, sessions and the
// signing key are not in it: they are made again on every start.
type state struct {
	Note    string      `json:"note"`
	Version int         `json:"version"`
	Users   []stateUser `json:"machineUsers"`
}

type stateUser struct {
	ID    string     `json:"id"`
	Name  string     `json:"name"`
	Roles []string   `json:"roles,omitempty"`
	Keys  []stateKey `json:"keys,omitempty"`
}

type stateKey struct {
	ID string `json:"id"`
	// PublicKey is the PEM "PUBLIC KEY" (PKIX) of the key.
	PublicKey string    `json:"publicKey"`
	Expires   time.Time `json:"expires,omitzero"`
}

// ErrBadState means Options.StateFile holds something the provider cannot
// read.
var ErrBadState = errors.New("devop: bad state file")

// loadState reads the machine users of path into p; a missing file is an
// empty state.
func (p *Provider) loadState(path string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("devop: read the state file %s: %w", path, err)
	}
	fix := "delete it to start with no machine user (every device must then be enrolled again)"
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("%w %s: %w: %s", ErrBadState, path, err, fix)
	}
	if st.Version != stateVersion {
		return fmt.Errorf("%w %s: version %d, want %d: %s", ErrBadState, path, st.Version, stateVersion, fix)
	}
	for i, su := range st.Users {
		if su.ID == "" || su.Name == "" {
			return fmt.Errorf("%w %s: machineUsers[%d] has no id or name: %s", ErrBadState, path, i, fix)
		}
		if _, dup := p.userNames[su.Name]; dup {
			return fmt.Errorf("%w %s: machineUsers[%d]: name %q appears twice: %s", ErrBadState, path, i, su.Name, fix)
		}
		u := &machineUser{id: su.ID, name: su.Name, roles: slices.Clone(su.Roles), keys: map[string]machineKey{}}
		for j, sk := range su.Keys {
			pub, err := parsePublicKey(sk.PublicKey)
			if err != nil || sk.ID == "" {
				return fmt.Errorf("%w %s: machineUsers[%d].keys[%d]: %v: %s", ErrBadState, path, i, j, cmpErr(err, "no id"), fix)
			}
			u.keys[sk.ID] = machineKey{pub: pub, expires: sk.Expires}
		}
		p.users[u.id] = u
		p.userNames[u.name] = u.id
	}
	return nil
}

func cmpErr(err error, otherwise string) any {
	if err != nil {
		return err
	}
	return otherwise
}

// parsePublicKey reads a PEM "PUBLIC KEY" holding an RSA key of at least
// 2048 bits.
func parsePublicKey(s string) (*rsa.PublicKey, error) {
	blk, _ := pem.Decode([]byte(s))
	if blk == nil || blk.Type != "PUBLIC KEY" {
		return nil, errors.New("publicKey is not a PEM PUBLIC KEY")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("publicKey: %w", err)
	}
	pub, ok := k.(*rsa.PublicKey)
	if !ok || pub.N.BitLen() < 2048 {
		return nil, errors.New("publicKey is not RSA of at least 2048 bits")
	}
	return pub, nil
}

// saveLocked writes the machine users to the state file (mode 0600, by an
// atomic rename), when there is one. The caller holds p.mu.
func (p *Provider) saveLocked() error {
	if p.stateFile == "" {
		return nil
	}
	st := state{Note: stateNote, Version: stateVersion}
	for _, u := range p.users {
		su := stateUser{ID: u.id, Name: u.name, Roles: slices.Clone(u.roles)}
		for kid, k := range u.keys {
			der, err := x509.MarshalPKIXPublicKey(k.pub)
			if err != nil {
				return fmt.Errorf("devop: state file: key %s of user %s: %w", kid, u.id, err)
			}
			su.Keys = append(su.Keys, stateKey{ID: kid, PublicKey: string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})), Expires: k.expires})
		}
		slices.SortFunc(su.Keys, func(a, b stateKey) int { return strings.Compare(a.ID, b.ID) })
		st.Users = append(st.Users, su)
	}
	slices.SortFunc(st.Users, func(a, b stateUser) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("devop: state file: %w", err)
	}
	tmp := p.stateFile + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("devop: write the state file: %w", err)
	}
	if err := os.Rename(tmp, p.stateFile); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("devop: write the state file: %w", err)
	}
	return nil
}

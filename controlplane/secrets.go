package controlplane

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"

	"github.com/nats-io/nkeys"

	"github.com/nationtech/harmony-fleet/authcallout"
)

// Secrets are what the callout's side of the server configuration is made
// of: the passwords of the three users that bypass the callout and the
// issuer and xkey key pairs. They are never logged nor put in an error;
// String redacts them.
type Secrets struct {
	// CalloutPassword, ReaderPassword and SysPassword are the passwords of
	// fleet-authcallout, fleet-identity-reader and fleet-authcallout-sys.
	CalloutPassword, ReaderPassword, SysPassword string
	// PresencePassword is fleet-presence's: the operator's system-account
	// user that follows device connections (ADR 0032).
	PresencePassword string
	// Issuer is the account key pair that signs user JWTs.
	Issuer nkeys.KeyPair
	// XKey is the curve key pair the callout's requests are encrypted to
	// (unused with Options.Plain).
	XKey nkeys.KeyPair
}

// NewSecrets generates fresh passwords (128 random bits each) and keys.
func NewSecrets() (*Secrets, error) {
	s := &Secrets{}
	for _, p := range []*string{&s.CalloutPassword, &s.ReaderPassword, &s.SysPassword, &s.PresencePassword} {
		var err error
		if *p, err = RandomPassword(); err != nil {
			return nil, err
		}
	}
	var err error
	if s.Issuer, err = nkeys.CreateAccount(); err != nil {
		return nil, fmt.Errorf("controlplane: issuer key: %w", err)
	}
	if s.XKey, err = nkeys.CreateCurveKeys(); err != nil {
		return nil, fmt.Errorf("controlplane: xkey: %w", err)
	}
	return s, nil
}

// RandomPassword is 128 random bits in hex.
func RandomPassword() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("controlplane: random password: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// String redacts the secrets.
func (s Secrets) String() string { return "controlplane.Secrets{redacted}" }

// GoString redacts the secrets.
func (s Secrets) GoString() string { return s.String() }

func (s *Secrets) validate(plain bool) error {
	var errs []error
	if s.CalloutPassword == "" || s.ReaderPassword == "" || s.SysPassword == "" || s.PresencePassword == "" {
		errs = append(errs, errors.New("controlplane: Secrets: a password is empty"))
	}
	if s.Issuer == nil {
		errs = append(errs, errors.New("controlplane: Secrets.Issuer is nil"))
	}
	if s.XKey == nil && !plain {
		errs = append(errs, errors.New("controlplane: Secrets.XKey is nil: give one or set Plain"))
	}
	return errors.Join(errs...)
}

// vars are the values of the variables authcallout.ServerConfig refers to:
// the passwords and the public halves of the keys (XKey empty when nil).
func (s *Secrets) vars() (authcallout.ConfigVars, error) {
	issuer, err := s.Issuer.PublicKey()
	if err != nil {
		return authcallout.ConfigVars{}, fmt.Errorf("controlplane: issuer key: %w", err)
	}
	v := authcallout.ConfigVars{CalloutPassword: s.CalloutPassword, ReaderPassword: s.ReaderPassword,
		SysPassword: s.SysPassword, PresencePassword: s.PresencePassword, Issuer: issuer}
	if s.XKey != nil {
		if v.XKey, err = s.XKey.PublicKey(); err != nil {
			return authcallout.ConfigVars{}, fmt.Errorf("controlplane: xkey: %w", err)
		}
	}
	return v, nil
}

// ServerConfig is the configuration a plane's server runs (serverConfig):
// what servers started elsewhere for Options.Servers must run, static
// being Options.StaticUser. It holds the passwords: write it to files only
// the server reads.
func (s *Secrets) ServerConfig(static *authcallout.StaticUser) (string, error) {
	return serverConfig(s, static)
}

// serverConfig is the configuration a plane runs by default: definitions
// of the documented variables from s (nats-server resolves them before the
// environment), authcallout.ServerConfig, and static when not nil.
func serverConfig(s *Secrets, static *authcallout.StaticUser) (string, error) {
	v, err := s.vars()
	if err != nil {
		return "", err
	}
	conf, err := authcallout.ServerConfigWith(v, static)
	if err != nil {
		return "", fmt.Errorf("controlplane: %w", err)
	}
	return conf, nil
}

// xkeyLines are the configuration's auth_callout xkey setting and the
// definition of the variable it names (an unused definition is an unknown
// field to nats-server).
var xkeyLines = regexp.MustCompile(`(?m)^(\s*xkey|FLEET_CALLOUT_XKEY): .*$`)

// plainConfig is conf without its xkey setting: the server then sends the
// callout plain requests.
func plainConfig(conf string) string { return xkeyLines.ReplaceAllString(conf, "") }

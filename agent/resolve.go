package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"

	"github.com/nationtech/harmony-fleet/score"
	"github.com/nationtech/harmony-fleet/secrets/openbao"
)

// Secrets resolves secret references (OpenBao in production). The agent
// does not watch the source: a value is read when a revision is first
// resolved, and kept for that revision (SecretPins).
type Secrets interface {
	// Resolve returns the value of key in the secret at path.
	Resolve(ctx context.Context, path, key string) (string, error)
}

// ErrNoSecrets: a score references secrets but the agent has no secret
// source configured.
var ErrNoSecrets = errors.New("the score references secrets but no secret source is configured")

// ComponentSecretSource names the secret source in an *UnavailableError.
const ComponentSecretSource = "secret source"

// ComponentRegistry names an image registry in an *UnavailableError: a pull
// failed with runtime.ErrRegistryUnavailable (the registry could not be
// reached or answered with a server error).
const ComponentRegistry = "registry"

// UnavailableError: a component the agent depends on (the secret source)
// could not answer now: it refused or dropped the connection, timed out,
// or answered with a server error (OpenBao's 503 while sealed). It says
// nothing about the workload: the agent reports the Deployment Pending and
// retries the pass with the engine's backoff. Component names what was
// unavailable; the message never holds a secret value.
type UnavailableError struct {
	Component string
	Err       error
}

func (e *UnavailableError) Error() string { return e.Component + " unavailable: " + e.Err.Error() }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// AsUnavailable returns the *UnavailableError in err's chain, if any.
func AsUnavailable(err error) (*UnavailableError, bool) {
	var ue *UnavailableError
	ok := errors.As(err, &ue)
	return ue, ok
}

// secretSourceErr marks a transient failure of the secret source as an
// *UnavailableError; a definite answer (a missing secret or key, a
// permission denied, a refused login, a bad reference) is returned as it
// is. Transient: openbao.ErrUnavailable, or a transport error or timeout
// from any other source.
func secretSourceErr(err error) error {
	if err == nil || !transient(err) {
		return err
	}
	return &UnavailableError{Component: ComponentSecretSource, Err: err}
}

// transient reports whether err is a failure to reach a server that may
// pass: openbao.ErrUnavailable, a failed dial, a refused or reset
// connection, a connection closed mid-answer, a timeout.
func transient(err error) bool {
	var op *net.OpError
	var ne net.Error
	return errors.Is(err, openbao.ErrUnavailable) || errors.As(err, &op) || (errors.As(err, &ne) && ne.Timeout()) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF)
}

// resolvedService is a service with its environment resolved.
type resolvedService struct {
	score.Service
	// env: plain and secret values, sorted by name. Never logged.
	env []score.EnvVar
	// verified is the image by the digest its signature was verified for
	// (repo@sha256:…), set by verifyImages when the revision has a
	// signature policy: the container is created from it, not from the
	// tag, which may name another image by then. Empty: Image.
	verified string
}

// resolved is a score with every secret reference resolved.
type resolved struct {
	init     *resolvedService
	services []resolvedService
	// revision is the hash of the canonical encoding of the resolved
	// score, secret values included. Only the hash reaches labels.
	revision string
}

// resolve reads the secrets of a score and computes its revision.
func resolve(ctx context.Context, s score.Score, secrets Secrets) (resolved, error) {
	one := func(svc score.Service) (resolvedService, error) {
		env := map[string]string{}
		for _, e := range svc.Env {
			env[e.Name] = e.Value
		}
		for _, se := range svc.SecretEnv {
			if secrets == nil {
				return resolvedService{}, fmt.Errorf("%s: secret_env %s: %w", svc.Name, se.Name, ErrNoSecrets)
			}
			v, err := secrets.Resolve(ctx, se.Secret, se.Key)
			if err != nil {
				err = secretSourceErr(err)
				return resolvedService{}, fmt.Errorf("%s: secret_env %s (secret %s, key %s): %w", svc.Name, se.Name, se.Secret, se.Key, err)
			}
			env[se.Name] = v
		}
		rs := resolvedService{Service: svc}
		for k, v := range env {
			rs.env = append(rs.env, score.EnvVar{Name: k, Value: v})
		}
		slices.SortFunc(rs.env, func(a, b score.EnvVar) int { return strings.Compare(a.Name, b.Name) })
		return rs, nil
	}
	var r resolved
	if s.Data.InitContainer != nil {
		ic, err := one(*s.Data.InitContainer)
		if err != nil {
			return resolved{}, err
		}
		r.init = &ic
	}
	for _, svc := range s.Data.Services {
		rs, err := one(svc)
		if err != nil {
			return resolved{}, err
		}
		r.services = append(r.services, rs)
	}
	r.revision = r.hash()
	return r, nil
}

// hash is sha256 over a canonical JSON encoding: fixed field order, env
// sorted by name, secret values included.
func (r resolved) hash() string {
	type canon struct {
		score.Service
		Env       []score.EnvVar    `json:"env"`
		SecretEnv []score.SecretEnv `json:"secret_env"`
	}
	c := func(s resolvedService) canon { return canon{Service: s.Service, Env: s.env, SecretEnv: s.SecretEnv} }
	doc := struct {
		Init     *canon  `json:"init"`
		Services []canon `json:"services"`
	}{}
	if r.init != nil {
		ic := c(*r.init)
		doc.Init = &ic
	}
	for _, s := range r.services {
		doc.Services = append(doc.Services, c(s))
	}
	b, _ := json.Marshal(doc) // plain strings and slices: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

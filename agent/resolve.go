package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nationtech/harmony-fleet/score"
)

// Secrets resolves secret references (OpenBao in production). The agent
// does not watch the source: a value is read when a score is resolved.
type Secrets interface {
	// Resolve returns the value of key in the secret at path.
	Resolve(ctx context.Context, path, key string) (string, error)
}

// ErrNoSecrets: a score references secrets but the agent has no secret
// source configured.
var ErrNoSecrets = errors.New("the score references secrets but no secret source is configured")

// resolvedService is a service with its environment resolved.
type resolvedService struct {
	score.Service
	// env: plain and secret values, sorted by name. Never logged.
	env []score.EnvVar
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

package agent

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nationtech/harmony-fleet/agent/runtime"
)

// PullCredential is a device pull secret: JSON with the three required
// string fields registry, username and password. The registry is an
// authority (host, and port when the registry uses one).
type PullCredential struct {
	Registry string `json:"registry"`
	Username string `json:"username"`
	Password string `json:"password"`
}

// String hides the password.
func (c PullCredential) String() string {
	return fmt.Sprintf("PullCredential{registry: %s, username: %s, password: ***}", c.Registry, c.Username)
}

// GoString hides the password.
func (c PullCredential) GoString() string { return c.String() }

// ErrBadCredential is wrapped by every pull-credential validation error.
var ErrBadCredential = errors.New("invalid pull credential")

// ParsePullCredential decodes and validates a pull secret. Errors name the
// field, never a value.
func ParsePullCredential(raw []byte) (PullCredential, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return PullCredential{}, fmt.Errorf("%w: not a JSON object with registry, username and password", ErrBadCredential)
	}
	var c PullCredential
	var errs []error
	for _, f := range []struct {
		name string
		into *string
	}{{"registry", &c.Registry}, {"username", &c.Username}, {"password", &c.Password}} {
		v, ok := m[f.name]
		s, isString := v.(string)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%w: field %q is missing", ErrBadCredential, f.name))
		case !isString:
			errs = append(errs, fmt.Errorf("%w: field %q must be a string", ErrBadCredential, f.name))
		case s == "":
			errs = append(errs, fmt.Errorf("%w: field %q is empty", ErrBadCredential, f.name))
		default:
			*f.into = s
		}
	}
	if len(errs) > 0 {
		return PullCredential{}, errors.Join(errs...)
	}
	return c, nil
}

// ImageAuthority returns the normalised registry authority of an image
// reference: runtime.ImageAuthority.
func ImageAuthority(ref string) string { return runtime.ImageAuthority(ref) }

// NormaliseAuthority lower-cases a registry authority and maps Docker Hub's
// aliases to docker.io: runtime.NormaliseAuthority.
func NormaliseAuthority(a string) string { return runtime.NormaliseAuthority(a) }

package openbao

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"
)

// PullSecretFolder is where device pull credentials live under a device
// prefix: <device-prefix>/registry/device-pull/<reference>.
const PullSecretFolder = "registry/device-pull"

// ErrBadReference: a secret path or pull-secret reference is not a clean
// relative path.
var ErrBadReference = errors.New("openbao: invalid secret reference")

// ErrBadValue: the secret exists but does not hold what was asked for (a
// missing key, a value that is not a string).
var ErrBadValue = errors.New("openbao: unusable secret value")

var cleanPath = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*$`)

// CheckPath reports whether p is a clean relative secret path: segments of
// letters, digits, '.', '_' and '-', no empty, "." or ".." segment.
func CheckPath(p string) error {
	if !cleanPath.MatchString(p) || strings.Contains("/"+p+"/", "/../") || strings.Contains("/"+p+"/", "/./") {
		return fmt.Errorf("%w: %q: use a relative path of letters, digits, '.', '_' and '-' segments separated by '/'", ErrBadReference, p)
	}
	return nil
}

// DeviceSecrets is a device's view of OpenBao: it logs in with the
// device's id_token (again when the token nears expiry or is refused), and
// reads secret_env values and pull credentials. It does not watch secrets:
// a value is read when asked for. Safe for concurrent use.
type DeviceSecrets struct {
	client  *Client
	idToken func(context.Context) (string, error)
	prefix  string

	login sync.Mutex // one login at a time
}

// NewDeviceSecrets returns the device's secret source. idToken returns a
// current id_token (identity/credential's Source.IDToken); devicePrefix is
// the KV path under which the device's pull credentials live.
func NewDeviceSecrets(c *Client, idToken func(context.Context) (string, error), devicePrefix string) (*DeviceSecrets, error) {
	devicePrefix = strings.Trim(devicePrefix, "/")
	if err := CheckPath(devicePrefix); err != nil {
		return nil, fmt.Errorf("device prefix: %w", err)
	}
	if idToken == nil {
		return nil, fmt.Errorf("%w: no id_token source", ErrConfig)
	}
	return &DeviceSecrets{client: c, idToken: idToken, prefix: devicePrefix}, nil
}

// ensureLogin logs in unless the client holds a token valid for another
// 30 s (or force).
func (d *DeviceSecrets) ensureLogin(ctx context.Context, force bool) error {
	d.login.Lock()
	defer d.login.Unlock()
	if !force && d.client.LoggedIn(30*time.Second) {
		return nil
	}
	tok, err := d.idToken(ctx)
	if err != nil {
		return fmt.Errorf("openbao: id_token for login: %w", err)
	}
	return d.client.Login(ctx, tok)
}

// read reads path, logging in first when needed and once more when the
// token was refused (it may have been revoked or expired early).
func (d *DeviceSecrets) read(ctx context.Context, path string) (map[string]any, error) {
	if err := d.ensureLogin(ctx, false); err != nil {
		return nil, err
	}
	data, err := d.client.Read(ctx, path)
	if errors.Is(err, ErrPermissionDenied) {
		d.client.forget()
		if lerr := d.ensureLogin(ctx, true); lerr != nil {
			return nil, lerr
		}
		data, err = d.client.Read(ctx, path)
	}
	return data, err
}

// Resolve returns the string value of key in the secret at path (relative
// to the KV mount). It implements the agent's Secrets.
func (d *DeviceSecrets) Resolve(ctx context.Context, path, key string) (string, error) {
	if err := CheckPath(path); err != nil {
		return "", err
	}
	data, err := d.read(ctx, path)
	if err != nil {
		return "", err
	}
	v, ok := data[key]
	if !ok {
		return "", fmt.Errorf("%w: the secret at %s has no key %q", ErrBadValue, path, key)
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: key %q of the secret at %s is not a string", ErrBadValue, key, path)
	}
	return s, nil
}

// PullCredential returns the JSON of the pull secret reference, read from
// <device-prefix>/registry/device-pull/<reference>. The agent validates
// its fields. It implements the agent's PullCredentials.
func (d *DeviceSecrets) PullCredential(ctx context.Context, reference string) ([]byte, error) {
	if err := CheckPath(reference); err != nil {
		return nil, fmt.Errorf("image_pull_secret: %w", err)
	}
	data, err := d.read(ctx, d.prefix+"/"+PullSecretFolder+"/"+reference)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("%w: pull secret %s cannot be encoded", ErrBadValue, reference)
	}
	return b, nil
}

// PullSecretPath is the KV path of a pull secret under devicePrefix.
func PullSecretPath(devicePrefix, reference string) string {
	return strings.Trim(devicePrefix, "/") + "/" + PullSecretFolder + "/" + reference
}

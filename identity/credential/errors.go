package credential

import "errors"

// ErrKeyFile means a key file is malformed: the error names the field at
// fault (never the key itself).
var ErrKeyFile = errors.New("credential: invalid key file")

// ErrGrant means the JWT-profile grant failed: the provider refused the
// assertion (unknown or revoked key, removed user) or was unreachable.
var ErrGrant = errors.New("credential: token grant failed")

// ErrNoIDToken means the provider answered the grant without an id_token
// (scope openid missing, or a provider that does not issue one).
var ErrNoIDToken = errors.New("credential: token response has no id_token")

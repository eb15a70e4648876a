package devop

import "errors"

// ErrUnknownUser means no machine user has the given id.
var ErrUnknownUser = errors.New("devop: unknown machine user")

// ErrUnknownKey means the user has no key with the given id (never added,
// removed, or expired).
var ErrUnknownKey = errors.New("devop: unknown machine key")

// ErrNotSupported answers every OpenID Provider flow this provider does not
// implement (refresh, client credentials, introspection, ...).
var ErrNotSupported = errors.New("devop: not supported by the development provider")

// ErrBadKey means a public key given to AddMachinePublicKey is not one the
// provider accepts (RSA of at least 2048 bits).
var ErrBadKey = errors.New("devop: bad machine key")

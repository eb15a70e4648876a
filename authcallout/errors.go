package authcallout

import "errors"

// Refusal reasons. Every refusal the callout answers wraps one of these; the
// server turns it into an authorization violation for the client.
var (
	// ErrNoToken means the client presented no token.
	ErrNoToken = errors.New("authcallout: no token presented")
	// ErrMalformedToken means the token is not a compact JWS of one
	// signature.
	ErrMalformedToken = errors.New("authcallout: malformed token")
	// ErrAlgorithm means the token's alg is not in the allow-list (none and
	// HMAC never are) or does not match its key.
	ErrAlgorithm = errors.New("authcallout: token algorithm not allowed")
	// ErrUnknownKey means no JWKS key has the token's kid, even after a
	// refresh.
	ErrUnknownKey = errors.New("authcallout: token signed with an unknown key")
	// ErrInvalidToken means the signature or a claim check failed (iss, aud,
	// exp, nbf, iat, required claims).
	ErrInvalidToken = errors.New("authcallout: invalid token")
	// ErrUnknownIdentity means the token's subject has no fleet-identity
	// entry and no control-plane role.
	ErrUnknownIdentity = errors.New("authcallout: unknown identity")
	// ErrQuarantined means the device is quarantined (blacklist label).
	ErrQuarantined = errors.New("authcallout: device is quarantined")
	// ErrBadRequest means the authorization request itself could not be
	// decoded or verified.
	ErrBadRequest = errors.New("authcallout: bad authorization request")
)

// ErrJWKS means the key set could not be fetched or parsed: a callout-side
// failure, not the client's fault (the connect is refused all the same).
var ErrJWKS = errors.New("authcallout: key set unavailable")

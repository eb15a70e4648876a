// Package credential is a device's identity: it reads the Zitadel machine key
// file, performs the OAuth 2.0 JWT-profile grant (zitadel/oidc pkg/client/
// profile) for scope openid, caches the id_token and refreshes it before it
// expires, and hands NATS a token callback so that every (re)connect presents
// a fresh id_token to the auth callout.
//
// Invariants: only the id_token is ever returned or presented (the access
// token of the grant is dropped; it is never a NATS or OpenBao bearer); the
// private key never appears in a log record, an error or a String.
//
// The agent imports this package, so it must never link k8s.io/*,
// sigs.k8s.io/*, the operator or package devop (internal/hygiene checks).
// Any package may import it.
package credential

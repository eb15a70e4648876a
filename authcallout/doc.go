// Package authcallout will hold the NATS auth callout service: it validates
// OIDC id_tokens, maps the identity to a device through the fleet-identity KV,
// and issues user JWTs that allow only the device's own subjects.
//
// Not implemented yet: the package holds no code. It may import events
// (subject builders); it must never link k8s.io/*, sigs.k8s.io/*, agent or
// operator (a test checks).
package authcallout

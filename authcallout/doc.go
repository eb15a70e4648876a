// Package authcallout is Fleet's NATS auth callout: it answers the server's
// authorization requests ($SYS.REQ.USER.AUTH, in a queue group so several
// replicas can run), verifies the OIDC id_token the client presents (jwx:
// JWKS cache with rotation, algorithm allow-list, iss, aud, exp, nbf, clock
// skew, required claims), maps the token's subject to a device through the
// fleet-identity KV (unknown or quarantined: refused), and issues a NATS user
// JWT (nats-io/jwt/v2, signed by the issuer account key) that expires no
// later than the id_token and permits only that device's own subjects.
// Control-plane identities are recognised by a role claim instead.
//
// Invariants: every request gets an answer (a user JWT or a signed refusal);
// the payload form of JetStream direct get is never permitted; a token or
// key never appears in a log record or an error.
//
// Of this repository it imports events (subject builders) only. It must
// never link k8s.io/*, sigs.k8s.io/*, agent or operator (internal/hygiene
// checks). cmd/fleet-authcallout and the one-machine control plane
// (controlplane) import it and make a replica's connections and
// Service with Connect; fleet dev (package dev), the scale benchmark
// (package bench) and the tests' chain (internal/callouttest) import
// it for its configuration, roles and limits; tests may.
package authcallout

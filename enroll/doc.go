// Package enroll is what `fleet enroll` does: it enrolls, re-enrolls and
// revokes devices. It mints a machine user and key at the identity provider
// (behind the Provider interface: the Zitadel management API in production,
// the development provider in `fleet dev` and tests), creates the Device
// custom resource carrying the identity subject (controller-runtime
// client), and writes the machine key file with mode 0600.
//
// Invariants: the private key goes only into the key file — never into a
// log record, an error, the Device resource or an event; a re-enrollment
// removes every previous key; a revocation removes every key and
// quarantines the Device (label blacklist=true) so that tokens issued before
// stop working at the next connect.
//
// It talks to Kubernetes, so only cmd/fleet (`fleet enroll`),
// package dev (`fleet dev` enrolls its devices the same way) and tests
// may import it; the agent, the auth callout and the operator must not
// (internal/hygiene checks).
package enroll

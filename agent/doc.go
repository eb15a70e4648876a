// Package agent is the device agent: it reads its own fleet-intent key and
// reconciles Podman with the exact PodmanV0 semantics of the product
// description (preflight, init container as a durable completion marker,
// services, replacement and removal with a 30 s stop timeout, ownership
// labels), reporting status per Deployment revision.
//
// What reaches the agent is untrusted: an intent value it cannot decode or
// that is not its own is skipped (the device keeps running what it runs), a
// command that does not decode for its subject is skipped and counted, and
// neither ever stops the agent.
//
// Metrics (optional, Options.Metrics) time each pass by result and count
// intent reads, image pulls, failed engine calls and unresolved secret
// references, and show the offline report buffer and the connection; their
// labels are bounded enums that never name a secret.
//
// This package holds the reconciler; the container engine is behind
// agent/runtime. It may import events; it never links k8s.io/*,
// sigs.k8s.io/* (except the YAML library the Podman bindings use) or the
// operator (a test checks).
package agent

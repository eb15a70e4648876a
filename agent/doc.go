// Package agent will hold the device agent: it reads its own fleet-intent key
// by subject-scoped direct get, follows it on a core subscription, reconciles
// Podman with the PodmanV0 semantics, and reports status, heartbeats and
// inventory.
//
// Not implemented yet: the package holds no code. It may import events; it
// must never link k8s.io/*, sigs.k8s.io/* or the operator (a test checks).
package agent

// Package e2e holds end-to-end tests that run the product's parts together
// on real components: a real API server, embedded JetStream, the operator,
// and the agent on real Podman. It has no code of its own; nothing imports
// it.
package e2e

// Package docs holds the project documentation and the tests that run its
// recipes (nats CLI, kubectl) against real components. It has no code of its
// own; nothing imports it.
package docs

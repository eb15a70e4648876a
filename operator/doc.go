// Package operator will hold the controllers for the namespaced Deployment,
// Device and TaskRun resources: target resolution, frozen revisions with the
// canary gate, intent and rollout events, and the projections it runs.
//
// Not implemented yet: the package holds no code. It may import k8s, events
// and projections; only cmd/ imports it.
package operator

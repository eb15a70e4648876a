// Package k8s holds the Kubernetes side of the Fleet API: the types of group
// fleet.nationtech.io/v1alpha1 in k8s/api/v1alpha1, and the CRD YAML that
// controller-gen generates from them in k8s/config/crd (`task generate`;
// never edited by hand, `task verify` fails on a diff), and the admission
// policies shipped with them in k8s/config/admission (written by hand: who
// may ask a rollout to pause, resume or approve, and for which generation).
// Its tests check the CRDs' validation and the policies against a real API
// server.
//
// This package has no code of its own, so nothing imports it; the operator,
// the projections, enrollment, the harmony SDK and cmd/fleet import
// k8s/api/v1alpha1, and the agent and the auth callout never link it
// (internal/hygiene checks).
package k8s

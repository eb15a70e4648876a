// Package k8s holds the Kubernetes side of the Fleet API: the types of group
// fleet.nationtech.io/v1alpha1 in k8s/api/v1alpha1, and the CRD YAML that
// controller-gen generates from them in k8s/config/crd (`task generate`;
// never edited by hand, `task verify` fails on a diff). Its tests check the
// CRDs' admission validation against a real API server.
//
// It imports only Kubernetes API machinery; the operator and projections
// import it, the agent and the auth callout never do.
package k8s

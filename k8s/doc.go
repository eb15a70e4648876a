// Package k8s will hold the Kubernetes API types of group
// fleet.nationtech.io/v1alpha1 (in k8s/api/v1alpha1) with their generated
// deepcopy code and CRD YAML.
//
// Not implemented yet: the package holds no code. It imports only
// Kubernetes API machinery; the operator and projections import it.
package k8s

// Package score owns the PodmanV0 score: the workload a Fleet Deployment
// runs (one optional init container, then one or more services), its Go
// types, its validation ([Validate]) and its parsing ([Parse],
// [ParsePort], [ParsePorts]).
//
// The rules are the Deployment CRD's: the types in k8s/api/v1alpha1 carry
// the same fields with kubebuilder markers and CEL rules, which the API
// server enforces on every write. This package is the same contract for
// code that never links Kubernetes: the agent decodes and checks the score
// of its intent with it, and the CI shipper (harmony) checks container
// names and port mappings with it before it builds anything. Tests in
// package k8s keep the two equal: the JSON field names of both type trees
// are compared by reflection, and a table of scores is run through
// [Validate] and through a real API server, which must accept and refuse
// the same ones.
//
// It imports the standard library only (nothing of k8s, the agent, the
// operator or events), so anyone in the module may import it, including the
// harmony SDK that application repositories link.
package score

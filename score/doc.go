// Package score owns the PodmanV0 score: the workload a Fleet Deployment
// runs (one optional init container, then one or more services), its Go
// types, its validation ([Validate]) and its parsing ([Parse],
// [ParsePort], [ParsePorts]).
//
// Its types are the Deployment CRD's spec.score too: package v1alpha1
// embeds Score, and the kubebuilder markers and CEL rules on the types here
// are what the API server enforces on every write. This package is the
// same contract for code that never links Kubernetes: the agent decodes and
// checks the score of its intent with it, and the CI shipper (harmony)
// checks container names and port mappings with it before it builds
// anything. A test in package k8s runs a table of scores through [Validate]
// and through a real API server, which must accept and refuse the same
// ones. controller-gen generates the deepcopy functions the CRD types need
// (zz_generated.deepcopy.go); never edit them by hand.
//
// It imports the standard library only (nothing of k8s, the agent, the
// operator or events), so anyone in the module may import it, including the
// harmony SDK that application repositories link. The markers are
// comments and the generated deepcopy code is plain Go.
//
// +kubebuilder:object:generate=true
package score

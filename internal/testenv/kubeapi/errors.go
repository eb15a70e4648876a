package kubeapi

import "errors"

// ErrBinariesMissing reports that kube-apiserver, etcd or kubectl is not in
// the binary folder. The remedy is `go tool -modfile=tools/go.mod task
// setup:k8s`; Main and Shared turn it into the testenv policy (fail in CI,
// skip elsewhere).
var ErrBinariesMissing = errors.New("kubeapi: Kubernetes test binaries are missing")

// ErrNoRepoRoot reports that no enclosing directory holds the product's
// go.mod, so the binary folder cannot be derived.
var ErrNoRepoRoot = errors.New("kubeapi: repository root not found")

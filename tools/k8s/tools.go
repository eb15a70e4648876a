//go:build tools

// Package k8s pins the Kubernetes binaries the test harness runs:
// kube-apiserver and kubectl, built from k8s.io/kubernetes with every staging
// module replaced by its published version. It is a separate module so that
// Kubernetes' dependencies never enter the product's module graph; the
// scripts/setup-k8s.sh script builds from it into .cache/k8s-<version>/.
package k8s

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
)

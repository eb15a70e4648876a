//go:build tools

// Package etcd pins the etcd server the test harness runs next to
// kube-apiserver. It is a separate module so that etcd's dependencies never
// enter the product's module graph (nor the Kubernetes tools module's, whose
// shared dependencies are pinned at other versions); scripts/setup-k8s.sh
// builds from it into .cache/k8s-<version>/.
package etcd

import _ "go.etcd.io/etcd/server/v3"

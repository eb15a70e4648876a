//go:build tools

// Package controllergen pins controller-gen, which generates the deepcopy
// code and CRD YAML of k8s/api. It is a separate module so its dependencies
// never enter the product.
package controllergen

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"

//go:build tools

// Package promtool pins the promtool used by the alert rule tests in
// deploy/prometheus. It is a separate module so Prometheus's dependencies
// never enter the product.
package promtool

import _ "github.com/prometheus/prometheus/cmd/promtool"

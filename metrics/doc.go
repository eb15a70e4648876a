// Package metrics owns how Fleet's binaries expose Prometheus metrics: the
// HTTP endpoint (Server: one listener, a gatherer per path), the registry
// every binary starts from (NewRegistry: the Go runtime and process
// collectors), and the description of what a set of collectors registers
// (Describe), which the catalogue test compares with docs/metrics.md.
//
// Each binary's own metrics live with the code that moves them (operator,
// authcallout, agent); this package holds nothing of theirs. Labels are
// bounded on the control plane: never one series per device.
package metrics

// Package projections will hold the pure folds (state, event) → state that
// build the fleet-intent and fleet-identity KV values and the CR status from
// the event streams, and the runners that apply them (RunOnce, RunToEnd,
// Run(ctx)). Rebuilding from the first event must give byte-identical results
// to the live projection.
//
// Not implemented yet: the package holds no code. It may import events and
// the k8s API types; the operator imports it.
package projections

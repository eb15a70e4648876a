// Package projections holds the pure folds (state, event) → state of Fleet
// and the decisions taken from them:
//
//   - Rollout: one Deployment's current revision folded from its intent,
//     rollout transitions and its targets' workload reports, with Next, the
//     rollout state machine's decision (canaries first, release only when
//     every canary converged, a failed canary fails the rollout).
//
// Folds never do I/O and never change their input; the same events in the
// same order give the same state, byte for byte. The KV and CR status
// projections and their runners are added here too.
//
// It may import events and the k8s API types; the operator imports it.
package projections

// Package projections holds the pure folds (state, event) → state of Fleet
// and the decisions taken from them:
//
//   - Rollout: one Deployment's current revision folded from its intent,
//     rollout transitions and its targets' workload reports, with Next, the
//     rollout state machine's decision (canaries first, release only when
//     every canary converged, a failed canary fails the rollout), and
//     Status, the Deployment status it projects;
//   - Intent: every device's fleet-intent value folded from the revisions
//     and rollout transitions, and the task entries of the TaskRuns that
//     froze the device as a target;
//   - TaskRuns: each TaskRun's status folded from its creation and its
//     targets' device.task.status reports;
//   - their JSON forms (MarshalJSON/UnmarshalJSON), the checkpoint that
//     resumes to the same state.
//
// Folds never do I/O and never change their input; the same events in the
// same order give the same state, byte for byte. The runners that feed them
// and write their results (fleet-intent KV, status, transitions) are the
// operator's RolloutRunner and TaskRunRunner; they read the streams through
// projections/runner, the one read loop (catch up, follow, skip, read
// again) of every projection reader.
//
// It may import events and the k8s API types; the operator and history
// (`fleet history`) import it.
package projections

// Package rolloutplan owns the one definition of a rollout plan's
// resolution (ADR 0016): a Deployment's spec.rollout frozen against a
// revision's targets into the events.RolloutPlan, the targets' batches and
// their disruption-budget groups. The operator's Deployment role resolves a
// revision's plan with it and `fleet rollout simulate` (history) resolves
// the simulated revision's with it, so the simulator's plan is the
// operator's by construction.
//
// It is pure (no I/O, no clock) and imports only the standard library,
// events and the k8s API types (and apimachinery's validation helpers).
package rolloutplan

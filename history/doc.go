// Package history answers questions about the past of a Fleet from its
// JetStream streams alone: a Deployment's timeline (revisions, rollout
// transitions, per-device results, the devices' Degraded and recovered
// reports), a device's timeline (the intent it was given, its reports, its
// commands, its last containers), the whole fleet as it was at a time T
// (desired versus reported per device, every Deployment's rollout state,
// the devices Degraded then), the exposure of an image (every device that
// ran a matching revision, from when to when: the recall list) and the
// what-if simulation of a rollout plan against the devices' recorded
// behaviour (ADR 0021).
//
// It never re-implements rollout logic: every derived answer (rollout stage,
// counts, status, a device's desired state) is the projections package's
// folds applied to the stored events, in the order the server stored them;
// the simulator feeds the same rollout fold simulated events and appends
// what its NextAt decides. A manifest's plan is resolved by
// projections/rolloutplan, the operator's own resolution.
// "As of T" means "every event the server had stored at T" (the stream
// timestamp, not the writer's clock); a read stops at the first event stored
// after T.
//
// A stored record that does not decode (device garbage, a forged report
// naming another device, data that does not fit its type) is left out of
// every answer, counted on Options.Skips and logged as a warning; it never
// fails a query.
//
// The exposure question reads the exposure index (ADR 0033) when the
// reader has one: the index's fold (ExposureIndexer) and its writer
// (ExposureIndexWriter, the one thing here that writes: the operator's
// exposureindex role runs it on its leader) live here, next to the
// exposure fold whose rules they apply to every revision.
//
// Its queries own no goroutines beyond their reads and keep no state
// between calls. It imports events, projections (and its runner), score and
// k8s/api of the module; cmd/fleet (`fleet history`, `fleet rollout
// simulate`), the dashboard's read models and the operator's exposure index
// role import it.
package history

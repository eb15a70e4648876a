// Package operator holds the Fleet controllers for the namespaced
// Deployment, TaskRun and Device resources of group fleet.nationtech.io:
//
//   - the Deployment controller (package deployments) resolves targets (selector ∩ not quarantined
//     ∩ allowedGroups membership from a GroupSource, failing closed without
//     one), freezes targets and canaries, and appends exactly one
//     deployment.revision.created event per generation (optimistic
//     concurrency on the Deployment's intent subject, so also across
//     restarts); deletion appends deployment.deleted behind a finalizer;
//   - the rollout runner (package rollouts) folds intent, rollout transitions and workload
//     reports, appends the state machine's transitions, writes the
//     fleet-intent KV and patches Deployment status, checkpointing its folds;
//   - the rollout-action controller (package rolloutactions) appends, once per
//     request id, the pause, resume and approve requests written in a
//     Deployment's fleet.nationtech.io/rollout-action annotation as
//     rollout transitions on its rollout subject (same optimistic
//     concurrency), and answers a malformed request, or one for another
//     generation than the Deployment's (now or when the controller first
//     saw it), with a Warning Event, removing the latter from the
//     Deployment; the rollout fold decides what a request means;
//   - the TaskRun controller (package taskruns) resolves a new TaskRun's targets by the same
//     rules and freezes them in exactly one taskrun.created event per
//     TaskRun UID; deletion appends taskrun.deleted behind a finalizer. The
//     rollout runner writes both kinds of entry (Deployments and tasks) into
//     the one fleet-intent value of each device;
//   - the TaskRun runner (package taskruns) folds TaskRun intent and device.task.status
//     reports into TaskRun status (phase, counts, latest failure,
//     per-device results), rebuilding from the streams at every start;
//   - the Device controller (package devices) projects heartbeats and inventory onto Device
//     status on transitions only, mirrors self-reported labels (never the
//     reserved ones) and keeps the fleet-identity KV in sync;
//   - the exposure index (package exposureindex) folds the workload and
//     health reports into the exposure index stream (events.StreamIndex)
//     `fleet history exposure` reads, resuming from its last record (ADR
//     0033);
//   - the pull-secret policy sync (package policysync, when OpenBao administration
//     is configured) keeps, per Deployment, an OpenBao ACL policy granting
//     read on exactly the pull secrets its score references, bound to the
//     JWT roles of its device groups.
//
// With Options.LeaderElection several operators run as replicas: only the
// holder of the Lease LeaseName runs all of the above; the others keep warm
// caches and serve metrics and health until they take the Lease over
// (LeaderElection.TakeoverBound). Every append stays conditional on its
// subject's last sequence, so a takeover at any point duplicates nothing.
//
// Device input is data, never control: every reader skips a stored record
// that does not decode (events.DecodeStored, the subject being
// authoritative for the device), counts it on Options.Skips — registered
// with controller-runtime's metrics registry as
// fleet_events_skipped_records_total — logs it without its payload, and
// moves its position past it.
//
// Package operator is the composition root: Options, Run, leader election
// and the metrics (Metrics: each role's collectors and the leader gauge)
// wire the roles, each in a sub-package (deployments, rolloutactions,
// rollouts, devices, taskruns, policysync, exposureindex), which share operator/internal
// and never import the root (internal/hygiene checks it). It may import k8s, events, projections, history (the exposure index's
// fold) and secrets/openbao; cmd/fleet-operator runs it, and the one-machine
// assemblies (fleet dev, the scale benchmark) embed it.
package operator

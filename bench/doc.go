// Package bench is the scale benchmark of Harmony Fleet (`task
// bench:scale`): N simulated devices, each running the real agent daemon
// (agent.Run on the simulated runtime) with its own NATS connection
// authenticated through the production chain (machine key file → id_token
// from the development OpenID Provider → auth callout), against one embedded
// NATS JetStream server, the auth callout and the operator's RolloutRunner.
//
// The control plane (server, provider, callout, runner, measurements) runs
// in the calling process; the devices run in child processes that re-execute
// the same binary with the "child" subcommand (RunChild), at most
// Options.PerProcess devices each, so that no process comes near the
// machine's open-file limit. For each size it measures the connection ramp,
// the time from a revision's append until every device reported it
// converged, the raw floor (the same number of KV puts observed by plain
// core-NATS subscribers), the server process's memory per connected device
// and the number of JetStream consumers (which must not grow with N).
//
// With Options.Flooders, flooding devices (enrolled and connected like the
// others, never targets; mode "flood") publish as fast as they can on
// their own report subjects while a second revision is rolled out: forged
// workload reports naming the targets, garbage and bodies at the device
// payload limit. It measures what they got stored, the rollout's times
// under the flood and the rollout runner's backlog, and fails if the runner
// stops or counts any of it for a target (ErrMiscounted).
//
// Figures are printed, never asserted; the run fails only when something
// does not work (a device never converges, the consumer count grows, the
// runner counts reports that are not the targets' own).
//
// The control plane's side reads in the order of a run: options.go
// (Options, their defaults and validation), run.go (Run: set-up,
// enrollment, one size after the other), size.go (one size: the ramp, the
// rollouts, the floor, the teardown between them), rollout.go (one
// rollout's measurement), flood.go (the flooders and the rollout under a
// flood), floor.go (the raw floor), result.go and report.go (the figures
// and their printing); children.go and wait.go start and await the child
// processes and counts, child.go is the children's side (RunChild).
//
// Only its command (cmd/fleet-scale) and its tests
// import it (internal/hygiene checks).
package bench

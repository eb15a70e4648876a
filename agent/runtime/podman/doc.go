// Package podman owns the runtime.Runtime that drives Podman through its REST
// API with the github.com/containers/podman/v5 bindings (pkg/bindings,
// containers and images): connect to a unix socket, create, start, inspect,
// wait, stop, remove and list containers, check and pull images with
// per-call registry credentials, watch container events (system.Events on
// /events, since the call, filtered by the engine and again here) and read
// a container's last log lines (containers.Logs with Tail). It owns the
// mapping of Podman's error replies to the runtime's typed errors and of
// its events to runtime.ContainerEvent.
//
// Checked on Podman 4.3.1: label filters on /events work, but filters of
// the same key are ORed (hence the second filter here); a died event
// carries the exit code in its containerExitCode attribute; a
// health_status event carries the status from before the check; a policy
// restart follows a death within milliseconds (no backoff; the events are
// died, restart, init, start); ps carries no restart count (Inspect's
// RestartCount does); and a kill under a memory limit on a cgroup v1 host
// was not flagged OOMKilled (so the flag is tested on a recorded inspect).
//
// Invariants: credentials travel only in the pull request's X-Registry-Auth
// header of that one call; the package never runs `podman login`, never
// writes an auth file and never logs. No error it returns contains a
// registry password or an environment value. It passes the runtime/runtimetest
// conformance suite against a real Podman service (checked with Podman 4.3.1).
//
// Build with CGO_ENABLED=0 and the tags `remote exclude_graphdriver_btrfs
// containers_image_openpgp`. It may be imported by agent packages,
// cmd/fleet-agent and package dev (the Podman device of `fleet dev`); it
// links no Kubernetes code (the bindings bring only the sigs.k8s.io/yaml
// library).
package podman

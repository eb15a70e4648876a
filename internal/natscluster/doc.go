// Package natscluster runs a JetStream cluster of N real nats-server
// processes on the loopback interface, so that tests and the chaos run can
// SIGKILL a server (which an in-process server cannot survive) and restart
// it on its store. Each server's configuration is the caller's (the
// product's auth callout configuration) plus its own name, ports,
// `jetstream { sync_interval: always }` (ADR 0002) and a `cluster {}`
// block routing to every other server; its log goes to a file whose tail
// callers put in their failure messages.
//
// The nats-server binary is the version go.mod pins, built once into the
// repository's .cache/tools (Binary; `task setup:nats-server` builds it
// ahead).
//
// Only tests, the chaos run (internal/chaos) and the scale benchmark
// (package bench) import it (internal/hygiene checks); no product
// binary links it.
package natscluster

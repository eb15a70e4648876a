// Package natscluster runs a JetStream cluster of N real nats-server
// processes on the loopback interface, so that tests and the chaos run can
// SIGKILL a server (which an in-process server cannot survive) and restart
// it on its store. Each server's configuration is the caller's (the
// product's auth callout configuration) plus its own name, ports,
// `jetstream { sync_interval: always }` (ADR 0002) and a `cluster {}`
// block routing to every other server; its log goes to a file whose tail
// callers put in their failure messages.
//
// Ports are chosen at random below the kernel's ephemeral range
// (/proc/sys/net/ipv4/ip_local_port_range; from 10000 up, or above the
// range when it leaves too little room below), each checked bindable: a
// killed server restarts on the same ports, and a port of the ephemeral
// range could meanwhile be taken by any process's outgoing connection or
// :0 listener ("bind: address already in use" on restart).
//
// The nats-server binary is the version go.mod pins, built once into the
// repository's .cache/tools (Binary; `task setup:nats-server` builds it
// ahead).
//
// Only tests, the chaos run (internal/chaos) and the scale benchmark
// (package bench) import it (internal/hygiene checks); no product
// binary links it.
package natscluster

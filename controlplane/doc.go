// Package controlplane assembles, once, the Fleet control plane that runs on
// one machine: the embedded NATS JetStream server (controlplane/natsembed) with
// the documented auth callout configuration (authcallout.ServerConfig:
// accounts AUTH, FLEET, DEVICES, SYS), its passwords and issuer and xkey
// secrets, the development OpenID Provider (identity/devop), the auth
// callout replicas (authcallout.Connect: the callout, fleet-identity-reader
// and fleet-authcallout-sys connections and the Service), the operator's
// connection (a machine user with the role fleet-operator, through the
// callout like every client), the event store and the provisioned Fleet
// streams and buckets (fleet-intent, fleet-identity).
//
// It owns the lifecycle of what it starts: Start builds a Plane, its
// long-running parts (and those a caller adds with Go) run in one errgroup
// whose first failure stops the others and is reported by Done and Err, and
// Close stops them, joins every goroutine, closes the connections and shuts
// the server down. What the parts do lives in their own packages.
//
// The development provider is in it, so no production binary may import
// it: only fleet dev (package dev), the scale benchmark
// (package bench) and the tests' chain (internal/callouttest) do
// (internal/hygiene checks).
package controlplane

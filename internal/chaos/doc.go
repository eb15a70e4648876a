// Package chaos holds the fault tests of Harmony Fleet on a NATS cluster
// (issue #18): a node of a three-server JetStream cluster SIGKILLed during
// a rollout (TestNodeLoss...), and the bounded chaos run (TestChaos, `task
// chaos`) that SIGKILLs operator replicas, NATS servers, callout replicas
// and agent processes on a seeded schedule while Deployments change.
//
// Its own code is what the tests account with: the Ledger (every append
// JetStream acknowledged, checked present once after the faults) and the
// fault Schedule. The world the tests run (servers from
// internal/natscluster, the control plane, the API server, agent
// processes) is in its test files. Nothing imports it but its tests.
package chaos

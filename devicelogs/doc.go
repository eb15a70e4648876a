// Package devicelogs is the control plane's side of reading a device's
// container log through its agent (ADR 0025): it authorizes a reader
// (Authorizer; KubeAccess asks the Kubernetes API server), records every
// attempt in FLEET_AUDIT (device.logs.requested), asks the device with an
// agent.command, and receives the answer on the request's own subject
// within bounds (Options: answer time, silence, bytes, rate, follow time,
// streams per device), cutting off a device that breaks one and counting
// it (Metrics). PrintableLine makes a line safe to print on a terminal or
// a page.
//
// It owns no state beyond the open streams of one Reader. `fleet logs`
// (cmd/fleet) and the dashboard use it; it never links the agent or the
// operator.
package devicelogs

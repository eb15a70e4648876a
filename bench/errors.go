package bench

import "errors"

// ErrConsumersGrew is returned when the number of JetStream consumers on the
// server grew while devices connected or converged: a device must cost a
// connection and core subscriptions, never a consumer.
var ErrConsumersGrew = errors.New("scalebench: the number of JetStream consumers grew with the number of devices")

// ErrIncomplete is returned when a phase did not complete before its
// deadline (devices not connected, not converged, puts not observed).
var ErrIncomplete = errors.New("scalebench: a phase did not complete before its deadline")

// ErrChild is returned when a child process fails or reports an error.
var ErrChild = errors.New("scalebench: child process failed")

// ErrMiscounted is returned when the rollout runner counted reports that
// were not the targets' own: it appended rollout.succeeded before every
// target had reported Converged on its own subject, or showed a failed
// count (in a transition or a Deployment status) that no target reported on
// its own subject. A flooding device's forged reports are what it would
// have counted.
var ErrMiscounted = errors.New("scalebench: the rollout runner counted reports that were not the targets' own")

// ErrControlPlane is returned when a component of the control plane (the
// rollout runner, the auth callout, the provider) stopped during a phase.
var ErrControlPlane = errors.New("scalebench: a control plane component stopped")

// ErrMeasurementGap is returned when the measurements' own connection
// reconnected during a phase: what devices published while it was down
// reached it never, so its counts may be short. The monitor connects as a
// static user that no token lifetime closes, so only a server that
// dropped it does this.
var ErrMeasurementGap = errors.New("scalebench: the measurements' connection reconnected during a phase")

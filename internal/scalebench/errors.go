package scalebench

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

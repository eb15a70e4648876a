package rollouts

import "github.com/nationtech/harmony-fleet/events"

// stamped returns opts followed by stamp when one is set. Stamp is an
// option of tests that pin the bytes of the events (internal/e2e): it sets
// an event's id and time, and runs last. In production it is nil and
// events.New gives a new ULID and the current time.
func stamped(stamp events.Option, opts ...events.Option) []events.Option {
	if stamp == nil {
		return opts
	}
	return append(opts, stamp)
}

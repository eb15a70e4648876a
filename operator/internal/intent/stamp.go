package intent

import (
	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Stamped returns opts followed by stamp when one is set. Stamp is an
// option of tests that pin the bytes of the events (internal/e2e): it sets
// an event's id and time, and runs last. In production it is nil and
// events.New gives a new ULID and the current time.
func Stamped(stamp events.Option, opts ...events.Option) []events.Option {
	if stamp == nil {
		return opts
	}
	return append(opts, stamp)
}

// AppendedRevision reports whether last, the last intent event of
// Deployment d's subject, is the revision of d's current (or a later)
// generation, and returns it. The Deployment controller asks it before it
// appends a revision; the rollout-action controller, to name the revision
// a request is for.
func AppendedRevision(last *events.Record, d *fleetv1.Deployment) (events.DeploymentRevisionCreated, bool) {
	if last == nil || last.Event.Type != events.TypeDeploymentRevisionCreated {
		return events.DeploymentRevisionCreated{}, false
	}
	rev, err := events.Decode[events.DeploymentRevisionCreated](last.Event)
	if err != nil || rev.UID != string(d.UID) || rev.Generation < d.Generation {
		return events.DeploymentRevisionCreated{}, false
	}
	return rev, true
}

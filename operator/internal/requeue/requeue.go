// Package requeue names when the operator's controllers try again: the
// waits they hand controller-runtime (ctrl.Result.RequeueAfter), in one
// place rather than as constants inline in each controller. Imported by the
// roles of the operator only.
package requeue

import (
	"math/rand/v2"
	"time"
)

// ConflictRetry is how soon a reconcile that lost an append race (the
// subject moved on: another operator appended first) re-reads.
const ConflictRetry = 50 * time.Millisecond

// PolicyWait is how soon a Deployment generation held until its
// pull-secret policy is written (PullSecretPolicy condition) is looked at
// again.
const PolicyWait = 5 * time.Second

// RevisionWait is how soon a rollout action for a generation whose
// revision is not appended yet is looked at again.
const RevisionWait = 2 * time.Second

// SeenWait is how soon a rollout action the predicates have not seen yet
// is looked at again.
const SeenWait = 100 * time.Millisecond

// StatusConflict is how soon a Device whose status apply was refused with a
// Conflict (its object changed since it was read) is reconciled again: 50
// ms plus up to 100 ms of jitter, so Devices that conflict together do not
// retry together.
func StatusConflict() time.Duration {
	return 50*time.Millisecond + rand.N(100*time.Millisecond)
}

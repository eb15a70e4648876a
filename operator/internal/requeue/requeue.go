// Package requeue names when the operator's controllers try again: the
// waits they hand controller-runtime (ctrl.Result.RequeueAfter), in one
// place rather than as constants inline in each controller. Imported by the
// roles of the operator only.
package requeue

import "time"

// ConflictRetry is how soon a reconcile that lost an append race (the
// subject moved on: another operator appended first) re-reads.
const ConflictRetry = 50 * time.Millisecond

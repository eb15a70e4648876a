// Package requeue names when the operator's controllers try again: the
// waits they hand controller-runtime (ctrl.Result.RequeueAfter), in one
// place rather than as constants inline in each controller, and the typed
// error (Stall) a reconcile returns when it cannot finish yet. A
// reconciler's Reconcile passes its result through Result, which turns a
// Stall (errors.As) into a requeue after its wait, without an error log
// and without controller-runtime's error backoff; any other error is
// returned as it is. Imported by the roles of the operator only.
package requeue

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
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

// RoleMissingWait is how soon the policy sync looks again at a Deployment
// whose device groups have no OpenBao JWT role (an administrator may
// create it).
const RoleMissingWait = time.Minute

// IdentityConflictWait is how soon a Device whose identity subject is
// registered to another device looks again.
const IdentityConflictWait = time.Minute

// KVRaceRetry is how soon a Device looks again after another writer changed
// its fleet-identity key between the read and the write.
const KVRaceRetry = 100 * time.Millisecond

// StatusConflict is how soon a Device whose status apply was refused with a
// Conflict (its object changed since it was read) is reconciled again: 50
// ms plus up to 100 ms of jitter, so Devices that conflict together do not
// retry together.
func StatusConflict() time.Duration {
	return 50*time.Millisecond + rand.N(100*time.Millisecond)
}

// Reason names what a stalled reconcile waits for.
type Reason string

// The reasons a reconcile stalls.
const (
	// ReasonConflict: an append lost a race (events.ErrConflict); re-read
	// after ConflictRetry.
	ReasonConflict Reason = "append conflict"
	// ReasonPolicy: the generation waits for its pull-secret policy;
	// after PolicyWait.
	ReasonPolicy Reason = "pull-secret policy not written yet"
	// ReasonRevision: the generation's revision is not appended yet;
	// after RevisionWait.
	ReasonRevision Reason = "revision not appended yet"
	// ReasonSeen: the watch predicates have not seen the value yet; after
	// SeenWait.
	ReasonSeen Reason = "annotation not seen yet"
)

// Stall is a reconcile that cannot finish yet and is tried again after
// Wait. It is not a failure: Result turns it into ctrl.Result{RequeueAfter:
// Wait} and no error.
type Stall struct {
	// Reason is what the reconcile waits for.
	Reason Reason
	// Wait is how soon the object is reconciled again.
	Wait time.Duration
	// Err is the error that caused the stall, if one did
	// (events.ErrConflict); nil otherwise.
	Err error
}

// Error says what the reconcile waits for and when it tries again.
func (s *Stall) Error() string {
	if s.Err != nil {
		return fmt.Sprintf("%s: retry in %s: %v", s.Reason, s.Wait, s.Err)
	}
	return fmt.Sprintf("%s: retry in %s", s.Reason, s.Wait)
}

// Unwrap returns the cause (errors.Is(err, events.ErrConflict)).
func (s *Stall) Unwrap() error { return s.Err }

// Conflict is the stall of an append that lost a race to another writer
// (cause, events.ErrConflict): re-read after ConflictRetry.
func Conflict(cause error) error {
	return &Stall{Reason: ReasonConflict, Wait: ConflictRetry, Err: cause}
}

// ForPolicy is the stall of a Deployment generation held until its
// pull-secret policy is written: again after PolicyWait.
func ForPolicy() error { return &Stall{Reason: ReasonPolicy, Wait: PolicyWait} }

// ForRevision is the stall of a rollout action for a generation whose
// revision is not appended yet: again after RevisionWait.
func ForRevision() error { return &Stall{Reason: ReasonRevision, Wait: RevisionWait} }

// UntilSeen is the stall of a rollout action the predicates have not seen
// yet: again after SeenWait.
func UntilSeen() error { return &Stall{Reason: ReasonSeen, Wait: SeenWait} }

// Result is what a Reconcile returns for the result and error of its work:
// a Stall anywhere in err's chain (errors.As) is a requeue after its Wait
// and no error; any other error, or none, is returned with res unchanged.
func Result(res ctrl.Result, err error) (ctrl.Result, error) {
	var s *Stall
	if errors.As(err, &s) {
		return ctrl.Result{RequeueAfter: s.Wait}, nil
	}
	return res, err
}

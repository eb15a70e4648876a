package requeue_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/operator/internal/requeue"
)

func TestAStallIsARequeueAfterItsWaitAndNoError(t *testing.T) {
	failed := errors.New("the API server is down")
	for _, tc := range []struct {
		name    string
		res     ctrl.Result
		err     error
		want    ctrl.Result
		wantErr error
	}{
		{"a lost append race re-reads after ConflictRetry", ctrl.Result{}, requeue.Conflict(events.ErrConflict),
			ctrl.Result{RequeueAfter: requeue.ConflictRetry}, nil},
		{"a wrapped stall is found in the chain", ctrl.Result{}, fmt.Errorf("deployment lab/api: %w", requeue.ForPolicy()),
			ctrl.Result{RequeueAfter: requeue.PolicyWait}, nil},
		{"a revision not appended yet waits RevisionWait", ctrl.Result{}, requeue.ForRevision(),
			ctrl.Result{RequeueAfter: requeue.RevisionWait}, nil},
		{"an annotation not seen yet waits SeenWait", ctrl.Result{RequeueAfter: time.Hour}, requeue.UntilSeen(),
			ctrl.Result{RequeueAfter: requeue.SeenWait}, nil},
		{"another error is returned as it is", ctrl.Result{}, failed, ctrl.Result{}, failed},
		{"no error keeps the result", ctrl.Result{RequeueAfter: time.Second}, nil, ctrl.Result{RequeueAfter: time.Second}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := requeue.Result(tc.res, tc.err)
			if !errors.Is(err, tc.wantErr) || (err == nil) != (tc.wantErr == nil) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAConflictStallKeepsItsCause(t *testing.T) {
	err := requeue.Conflict(events.ErrConflict)
	if !errors.Is(err, events.ErrConflict) {
		t.Errorf("errors.Is(%v, events.ErrConflict) = false", err)
	}
	var s *requeue.Stall
	if !errors.As(err, &s) || s.Reason != requeue.ReasonConflict || s.Wait != requeue.ConflictRetry {
		t.Errorf("stall %+v, want reason %q after %s", s, requeue.ReasonConflict, requeue.ConflictRetry)
	}
	if want := "append conflict: retry in 50ms: " + events.ErrConflict.Error(); err.Error() != want {
		t.Errorf("message %q, want %q", err.Error(), want)
	}
}

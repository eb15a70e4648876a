package projections

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Status returns the Deployment status fields the rollout projection owns:
// observedGeneration, the revision it describes, phase, counts, latest
// failure and the Ready condition. observedGeneration is the revision's
// generation and comes in the same status as the phase and Ready that
// describe it, so no reader ever sees a generation paired with the phase of
// an earlier one. Every time in it comes from events, so a rebuild from zero
// gives the same status as the live projection. The zero Rollout has no
// status.
//
// Status is StatusAt without a time: the progress deadline is never
// exceeded.
func (r Rollout) Status() (fleetv1.DeploymentStatus, bool) { return r.StatusAt(time.Time{}, 0) }

// StatusAt is the status at the operator's time now, with def the
// operator's progress deadline (--progress-deadline; 0: none) for a
// revision that sets none: Status's fields and the Progressing condition,
// which is False with reason ProgressDeadlineExceeded once
// DeadlineExceeded(now, def). The same events and the same now give the
// same status, so a rebuild from zero still equals the live projection.
func (r Rollout) StatusAt(now time.Time, def time.Duration) (fleetv1.DeploymentStatus, bool) {
	if r.UID == "" {
		return fleetv1.DeploymentStatus{}, false
	}
	c := r.Counts()
	st := fleetv1.DeploymentStatus{
		ObservedGeneration: r.Generation,
		Revision:           &fleetv1.RevisionRef{UID: r.UID, Generation: r.Generation, ID: r.RevisionID},
		Counts: fleetv1.RolloutCounts{Total: int32(c.Total), Succeeded: int32(c.Succeeded), Pending: int32(c.Pending), Failed: int32(c.Failed),
			Canaries: int32(c.Canaries), CanariesSucceeded: int32(c.CanariesSucceeded), CanariesFailed: int32(c.CanariesFailed)},
	}
	ready := metav1.Condition{Type: fleetv1.ConditionReady, Status: metav1.ConditionFalse, ObservedGeneration: r.Generation,
		LastTransitionTime: metav1.NewTime(r.StageAt), Reason: fleetv1.ReasonRolloutInProgress}
	switch r.Stage {
	case StageNone, StageStarted:
		st.Phase = fleetv1.PhasePending
		ready.Message = fmt.Sprintf("revision %s: rollout starting", r.RevisionID)
	case StageCanary, StageCanariesConverged:
		st.Phase = fleetv1.PhaseCanary
		ready.Message = fmt.Sprintf("revision %s: %d of %d canaries converged", r.RevisionID, c.CanariesSucceeded, c.Canaries)
	case StageReleased:
		st.Phase = fleetv1.PhaseProgressing
		ready.Message = fmt.Sprintf("revision %s: %d of %d targets converged", r.RevisionID, c.Succeeded, c.Total)
	case StageBatches:
		st.Phase = fleetv1.PhaseProgressing
		ready.Message = fmt.Sprintf("revision %s: batch %d of %d; %d of %d targets converged", r.RevisionID, r.Batch, len(r.Batches), c.Succeeded, c.Total)
	case StageSucceeded:
		st.Phase = fleetv1.PhaseSucceeded
		ready.Status, ready.Reason = metav1.ConditionTrue, fleetv1.ReasonRolloutSucceeded
		ready.Message = fmt.Sprintf("revision %s: all %d targets converged", r.RevisionID, c.Total)
		if r.Follow && c.Succeeded < c.Total {
			// Followers joined after the rollout ended: it stays
			// Succeeded, and the message says where they are.
			ready.Message = fmt.Sprintf("revision %s: the rollout succeeded; %d of %d targets converged, %d followers", r.RevisionID, c.Succeeded, c.Total, c.Followers)
		}
	case StageFailed:
		st.Phase = fleetv1.PhaseFailed
		ready.Reason = fleetv1.ReasonRolloutFailed
		if c.CanariesFailed > 0 && !r.ReleasedAll {
			ready.Reason = fleetv1.ReasonCanaryFailed
		}
		ready.Message = fmt.Sprintf("revision %s: %d failed, %d succeeded, %d pending of %d", r.RevisionID, c.Failed, c.Succeeded, c.Pending, c.Total)
		if r.RolledBackTo > 0 {
			ready.Reason = fleetv1.ReasonRolledBack
			ready.Message = fmt.Sprintf("revision %s failed and was rolled back to generation %d on the devices it was handed: %d failed, %d succeeded, %d pending of %d",
				r.RevisionID, r.RolledBackTo, c.Failed, c.Succeeded, c.Pending, c.Total)
		}
		if c.Total == 0 {
			ready.Reason = fleetv1.ReasonNoTargets
			ready.Message = fmt.Sprintf("revision %s has no targets: no eligible device matched when it was created (the TargetsResolved condition says why); apply a new generation once devices match", r.RevisionID)
		}
	}
	// A pause reason may quote a device's error: escaped, then cut.
	pauseReason := events.PrintableLinesCut(r.PauseReason, MaxDeviceText)
	if !r.Terminal() {
		switch {
		case r.Paused && r.PauseReason != "":
			ready.Message += "; paused: " + pauseReason
		case r.Paused:
			ready.Message += "; paused by " + r.PausedBy
		case r.AwaitingApproval > 0:
			ready.Message += fmt.Sprintf("; batch %d awaits approval", r.AwaitingApproval)
		}
	}
	exceeded := r.DeadlineExceeded(now, def)
	if exceeded {
		ready.Message += "; progress deadline exceeded"
	}
	if n := len(r.Removed); n > 0 {
		st.Counts.Removed = int32(n)
		for _, rm := range r.Removed[:min(n, fleetv1.MaxRemovedListed)] {
			st.Removed = append(st.Removed, fleetv1.RemovedTarget{Device: rm.Device, Reason: rm.Reason})
		}
		if !r.Terminal() {
			ready.Message += fmt.Sprintf("; %d removed (see status.removed)", n)
		}
	}
	if r.planned() || r.Paused {
		st.Plan = &fleetv1.PlanStatus{Batch: int32(r.Batch), Batches: int32(len(r.Batches)), AwaitingApproval: int32(r.AwaitingApproval),
			Paused: r.Paused && !r.Terminal(), RolledBackTo: r.RolledBackTo}
		if st.Plan.Paused {
			st.Plan.PausedBy, st.Plan.PauseReason = r.PausedBy, pauseReason
		}
	}
	if r.LastFailure != nil {
		// The error is the device's text: escaped (events.Printable), then
		// cut, whatever length a hostile device sent.
		st.LatestFailure = &fleetv1.DeviceFailure{Device: r.LastFailure.Device, Error: events.PrintableLinesCut(r.LastFailure.Error, MaxDeviceText),
			Time: metav1.NewTime(r.LastFailAt)}
	}
	// Escaped again (a no-op on what is escaped) and bounded: the API
	// server refuses the whole status over the CRD's maxLength.
	ready.Message = events.PrintableLinesCut(ready.Message, MaxConditionMessage)
	meta.SetStatusCondition(&st.Conditions, ready)
	st.Conditions[0].LastTransitionTime = metav1.NewTime(r.StageAt) // SetStatusCondition stamps now when zero
	prog := r.progressing(ready, exceeded, def)
	var windowMessage string
	st.Window, windowMessage = r.windowStatus(now)
	if windowMessage != "" && prog.Reason == fleetv1.ReasonRolloutProgressing {
		prog.Message = windowMessage
	}
	prog.Message = events.PrintableLinesCut(prog.Message, MaxConditionMessage)
	meta.SetStatusCondition(&st.Conditions, prog)
	st.Conditions[1].LastTransitionTime = prog.LastTransitionTime
	if r.Follow {
		r.followStatus(&st)
	}
	return st, true
}

// followStatus adds what a Follow revision (ADR 0026) shows: its
// followers, their count, and the Followers condition. A Frozen revision's
// status has none of it.
func (r Rollout) followStatus(st *fleetv1.DeploymentStatus) {
	n := len(r.Followers)
	st.Counts.Followers = int32(r.Counts().Followers)
	handed := n - int(st.Counts.Followers)
	for _, f := range r.Followers[:min(n, fleetv1.MaxFollowersListed)] {
		fl := fleetv1.Follower{Device: f.Device, Reason: f.Reason,
			Change: events.PrintableLinesCut(f.Change, MaxDeviceText), Since: metav1.NewTime(f.At)}
		if f.HandedGeneration > 0 {
			fl.Revision = &fleetv1.RevisionRef{UID: r.UID, Generation: f.HandedGeneration, ID: f.HandedRevisionID}
		}
		st.Followers = append(st.Followers, fl)
	}
	at := r.StageAt
	if n > 0 && r.Followers[n-1].At.After(at) {
		at = r.Followers[n-1].At
	}
	c := metav1.Condition{Type: fleetv1.ConditionFollowers, Status: metav1.ConditionTrue, Reason: fleetv1.ReasonFollowingSelector,
		ObservedGeneration: r.Generation, LastTransitionTime: metav1.NewTime(at),
		Message: fmt.Sprintf("revision %s follows its selector: %d of %d targets joined after it was frozen (status.followers), %d left or were removed (status.removed)",
			r.RevisionID, int(st.Counts.Followers), len(r.Targets), len(r.Removed))}
	if handed > 0 {
		// Joined after the rollout failed, or before it and never
		// handed it (ADR 0026). The message is pinned by the golden
		// logs' fold (events/testdata/golden/folds.json): "joined since"
		// counts both.
		var gen int64
		for _, f := range r.Followers {
			gen = max(gen, f.HandedGeneration)
		}
		c.Message += fmt.Sprintf("; its rollout failed, so %d devices that joined since were handed generation %d, the last whose rollout succeeded",
			handed, gen)
	}
	st.Conditions = append(st.Conditions, c)
}

// progressing is the Progressing condition: False at every stop (success,
// failure, no targets, the progress deadline exceeded), Unknown while
// paused or awaiting an approval, True while moving. ready is the Ready
// condition of the same status (its reason and message on a failure).
func (r Rollout) progressing(ready metav1.Condition, exceeded bool, def time.Duration) metav1.Condition {
	c := metav1.Condition{Type: fleetv1.ConditionProgressing, ObservedGeneration: r.Generation, LastTransitionTime: metav1.NewTime(r.ProgressAt)}
	d := r.Deadline(def)
	switch {
	case r.Stage == StageSucceeded:
		c.Status, c.Reason, c.LastTransitionTime = metav1.ConditionFalse, fleetv1.ReasonRolloutSucceeded, metav1.NewTime(r.StageAt)
		c.Message = fmt.Sprintf("revision %s: the rollout ended: it succeeded", r.RevisionID)
	case r.Stage == StageFailed:
		c.Status, c.Reason, c.LastTransitionTime = metav1.ConditionFalse, ready.Reason, metav1.NewTime(r.StageAt)
		c.Message = "the rollout ended: it failed: " + ready.Message
	case r.Paused:
		c.Status, c.Reason = metav1.ConditionUnknown, fleetv1.ReasonRolloutPaused
		c.Message = fmt.Sprintf("revision %s: paused by %s; the progress deadline does not run until it is resumed", r.RevisionID, r.PausedBy)
		if r.PauseReason != "" {
			// The pause reason may quote a device's error: escaped, on one
			// line, bounded.
			c.Message = fmt.Sprintf("revision %s: paused: %s; the progress deadline does not run until it is resumed", r.RevisionID,
				events.PrintableCut(r.PauseReason, MaxDeviceText))
		}
	case r.AwaitingApproval > 0:
		c.Status, c.Reason = metav1.ConditionUnknown, fleetv1.ReasonAwaitingApproval
		c.Message = fmt.Sprintf("revision %s: batch %d awaits approval; the progress deadline does not run until it is approved", r.RevisionID, r.AwaitingApproval)
	case exceeded:
		c.Status, c.Reason = metav1.ConditionFalse, fleetv1.ReasonProgressDeadlineExceeded
		c.LastTransitionTime = metav1.NewTime(r.ProgressAt.Add(d))
		c.Message = r.exceededMessage(d)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, fleetv1.ReasonRolloutProgressing
		switch {
		case !r.SoakEnds().IsZero():
			c.Message = fmt.Sprintf("revision %s: batch %d soaks until %s", r.RevisionID, r.Batch, r.SoakEnds().UTC().Format(time.RFC3339))
		case d > 0:
			c.Message = fmt.Sprintf("revision %s: last progress at %s; progress deadline %s", r.RevisionID, r.ProgressAt.UTC().Format(time.RFC3339), d)
		default:
			c.Message = fmt.Sprintf("revision %s: last progress at %s; no progress deadline", r.RevisionID, r.ProgressAt.UTC().Format(time.RFC3339))
		}
	}
	return c
}

// MaxDeviceText is how many bytes of a device's text (an error, a pause
// reason quoting one, a task's message) the control plane writes into a
// status field, escaped then cut (events.PrintableCut): what the agent
// sends at most (events.MaxReportError), whatever a hostile device sends.
const MaxDeviceText = events.MaxReportError

// MaxAgentVersionText is how many bytes of an agent's version a status
// holds (escaped, cut).
const MaxAgentVersionText = 256

// MaxConditionMessage is how many bytes a condition's message the
// projections build holds at most (escaped, cut): well under the CRDs'
// maxLength of 32768, which the API server enforces by refusing the whole
// status.
const MaxConditionMessage = 8192

// maxWaitingListed is how many waiting targets the ProgressDeadlineExceeded
// message names; maxReportText how many bytes of each one's error it
// quotes (escaped), before the cut marker.
const (
	maxWaitingListed = 5
	maxReportText    = 200
)

// exceededMessage names the deadline, the last progress, and up to maxWaitingListed waiting targets with their last
// report.
func (r Rollout) exceededMessage(d time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "revision %s: no progress within the progress deadline (%s) since %s: no transition, and no target's first report or first result (Converged or Failed)",
		r.RevisionID, d, r.ProgressAt.UTC().Format(time.RFC3339))
	waiting, n := r.Waiting(maxWaitingListed)
	if n == 0 {
		return b.String()
	}
	fmt.Fprintf(&b, "; %d waiting:", n)
	for i, w := range waiting {
		if i > 0 {
			b.WriteString(";")
		}
		b.WriteString(" " + w.Device)
		if w.Result.Phase == "" {
			b.WriteString(" no report yet")
			continue
		}
		fmt.Fprintf(&b, " %s since %s", w.Result.Phase, w.Result.Since.UTC().Format(time.RFC3339))
		if e := w.Result.Error; e != "" {
			// The device's text: escaped, on one line, cut after escaping.
			b.WriteString(": " + events.PrintableCut(e, maxReportText+len(events.CutMarker)))
		}
	}
	if n > len(waiting) {
		fmt.Fprintf(&b, "; and %d more", n-len(waiting))
	}
	return b.String()
}

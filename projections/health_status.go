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

// maxDegradedNamed is how many degraded devices the Degraded condition's
// message names.
const maxDegradedNamed = 5

// DeploymentStatusAt is the Deployment status the rollout runner writes:
// r.StatusAt(now, def), and what h, the Deployment's health fold, says
// (ADR 0019): the Degraded condition (True, ServicesDegraded, naming up to
// five devices; else False, NoDegradedDevices), status.degraded (the first
// fleetv1.MaxDegradedListed devices) and counts.degraded. Health never
// changes the phase, the other counts or Ready. A nil h is a Deployment
// no device reported degraded. Every time comes from the streams, so a
// rebuild gives the same status at the same now.
func DeploymentStatusAt(r Rollout, h *Health, now time.Time, def time.Duration) (fleetv1.DeploymentStatus, bool) {
	st, ok := r.StatusAt(now, def)
	if !ok {
		return st, false
	}
	entries := h.Entries()
	c := metav1.Condition{Type: fleetv1.ConditionDegraded, Status: metav1.ConditionFalse, ObservedGeneration: r.Generation,
		Reason: fleetv1.ReasonNoDegradedDevices, LastTransitionTime: metav1.NewTime(r.StageAt)}
	if at := h.Since(); !at.IsZero() {
		c.LastTransitionTime = metav1.NewTime(at)
	}
	if len(entries) == 0 {
		c.Message = fmt.Sprintf("revision %s: no device reports a service crash-looping, OOM-killed, down or unhealthy", r.RevisionID)
	} else {
		c.Status, c.Reason = metav1.ConditionTrue, fleetv1.ReasonServicesDegraded
		c.Message = events.PrintableCut(degradedMessage(entries, st.Counts.Total, r.RevisionID), MaxConditionMessage)
		st.Counts.Degraded = int32(len(entries))
		for _, e := range entries[:min(len(entries), fleetv1.MaxDegradedListed)] {
			st.Degraded = append(st.Degraded, fleetv1.DegradedDevice{Device: e.Device, Revision: e.RevisionID, Reason: e.Reason,
				Message: e.Message, Since: metav1.NewTime(e.Since)})
		}
	}
	meta.SetStatusCondition(&st.Conditions, c)
	// SetStatusCondition stamps now when the time is zero, and keeps the
	// old time when only the message changed: the fold's time is the one.
	meta.FindStatusCondition(st.Conditions, fleetv1.ConditionDegraded).LastTransitionTime = c.LastTransitionTime
	return st, true
}

// degradedMessage is "2 of 40 devices degraded: podman-1 (api: CrashLoop,
// exited with code 2, 3 restarts in 5m0s), …", naming at most
// maxDegradedNamed devices; total is the revision's targets. A device that
// runs another revision than current is named with it.
func degradedMessage(entries []DegradedEntry, total int32, current string) string {
	var b strings.Builder
	if total > 0 {
		fmt.Fprintf(&b, "%d of %d devices degraded:", len(entries), total)
	} else {
		fmt.Fprintf(&b, "%d devices degraded:", len(entries))
	}
	for i, e := range entries[:min(len(entries), maxDegradedNamed)] {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, " %s (%s", e.Device, e.Message)
		if e.RevisionID != current {
			fmt.Fprintf(&b, "; on revision %s", e.RevisionID)
		}
		b.WriteString(")")
	}
	if n := len(entries) - maxDegradedNamed; n > 0 {
		fmt.Fprintf(&b, ", and %d more (see status.degraded)", n)
	}
	return b.String()
}

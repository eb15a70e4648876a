package fleetview

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/history"
	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// degradedOf is the degradation of st's revision: its Degraded condition
// (ADR 0019 A.6) of the status's generation True (nil: none, or an
// operator that does not set the condition), with status.counts.degraded
// and the devices of status.degraded (the first MaxDegradedShown). An
// operator that lists no device leaves them to the streams
// (timelineHealth).
func degradedOf(st fleetv1.DeploymentStatus) *Degraded {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == fleetv1.ConditionDegraded && c.Status == metav1.ConditionTrue && c.ObservedGeneration == st.ObservedGeneration {
			g := &Degraded{Since: c.LastTransitionTime.UTC(), Message: clean(c.Message, MaxErrorLength), Count: int(st.Counts.Degraded),
				Devices: make([]DegradedDevice, 0, min(len(st.Degraded), MaxDegradedShown))}
			for _, d := range st.Degraded[:min(len(st.Degraded), MaxDegradedShown)] {
				g.Devices = append(g.Devices, DegradedDevice{Device: clean(d.Device, MaxFieldLength), Reason: clean(d.Reason, MaxFieldLength),
					Message: clean(d.Message, MaxErrorLength), Since: d.Since.UTC()})
			}
			g.Count = max(g.Count, len(st.Degraded))
			return g
		}
	}
	return nil
}

// degradedAlert is the deployment-degraded alert of d; false when d is not
// degraded. The episode is the revision and the condition's transition:
// a recovery and a new degradation make a new one.
func degradedAlert(d *fleetv1.Deployment) (Alert, bool) {
	g := degradedOf(d.Status)
	if g == nil {
		return Alert{}, false
	}
	return Alert{ID: alertID(AlertDeploymentDegraded, d.Namespace, d.Name, string(d.UID), strconv.FormatInt(d.Status.ObservedGeneration, 10),
		g.Since.Format(time.RFC3339Nano)), Kind: AlertDeploymentDegraded, Severity: SeverityWarning,
		Page: PageRef{Kind: PageDeployment, Key: d.Namespace + "/" + d.Name}, Since: g.Since,
		Message: fmt.Sprintf("Deployment %s/%s: services degraded: %s", d.Namespace, d.Name, clean(g.Message, MaxFieldLength))}, true
}

// hasCondition reports whether cs holds a condition of type t.
func hasCondition(cs []metav1.Condition, t string) bool {
	return slices.ContainsFunc(cs, func(c metav1.Condition) bool { return c.Type == t })
}

// timelineHealth completes a Deployment page's Degraded part from its
// timeline: the devices whose last health report of the current revision
// is Degraded. When the Deployment's status has a Degraded condition
// (crSays), the status decides whether it is degraded, and the timeline
// names the devices only when status.degraded lists none; without one (an
// operator that does not write it, a deleted Deployment) the timeline
// decides.
func timelineHealth(dd *DeploymentDetail, tl *history.DeploymentTimeline, crSays bool) {
	st := tl.State
	if st == nil {
		return
	}
	var devices []DegradedDevice
	var since time.Time
	for _, h := range tl.Degraded {
		if h.UID != st.UID || h.Generation != st.Generation {
			continue
		}
		devices = append(devices, DegradedDevice{Device: clean(h.Device, MaxFieldLength), Reason: clean(h.Reason, MaxFieldLength),
			Message: clean(strings.TrimPrefix(h.Summary, h.Device+" "), MaxErrorLength), Since: h.Since})
		if since.IsZero() || h.Since.Before(since) {
			since = h.Since
		}
	}
	slices.SortFunc(devices, func(a, b DegradedDevice) int { return cmp.Compare(a.Device, b.Device) })
	switch {
	case dd.Degraded != nil && len(dd.Degraded.Devices) > 0:
		return // the operator's list: devices that hold the revision
	case dd.Degraded != nil:
		dd.Degraded.Count = max(dd.Degraded.Count, len(devices))
	case crSays || len(devices) == 0:
		return
	default:
		dd.Degraded = &Degraded{Since: since, Count: len(devices)}
	}
	dd.Degraded.Devices = devices[:min(len(devices), MaxDegradedShown)]
	if dd.Degraded.Devices == nil {
		dd.Degraded.Devices = []DegradedDevice{}
	}
}

// deviceWorkloads converts a device's last container report, bounding
// what the device wrote: a Deployment whose namespace or name is not a
// valid token is left out (no Deployment has it). The bool is true when
// the report was cut (by the device, the history clip or here).
func deviceWorkloads(s *history.ContainersSnapshot) ([]DeviceWorkload, bool) {
	out := []DeviceWorkload{}
	truncated := s.Truncated
	for _, w := range s.Workloads {
		if !validKey(w.Namespace, w.Deployment) {
			continue
		}
		if len(out) == MaxWorkloadsShown {
			truncated = true
			break
		}
		dw := DeviceWorkload{Namespace: w.Namespace, Name: w.Deployment, Generation: w.Generation, RevisionID: clean(w.RevisionID, MaxFieldLength),
			Degraded: clean(w.Degraded, MaxFieldLength), Containers: make([]Container, 0, min(len(w.Containers), MaxContainersShown))}
		for i, c := range w.Containers {
			if i == MaxContainersShown {
				truncated = true
				break
			}
			dw.Containers = append(dw.Containers, containerOf(c))
		}
		out = append(out, dw)
	}
	slices.SortStableFunc(out, func(a, b DeviceWorkload) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, truncated
}

// containerOf converts one container's state, cleaned.
func containerOf(c events.ContainerState) Container {
	out := Container{Name: clean(c.Name, MaxFieldLength), Role: clean(c.Role, MaxFieldLength), State: clean(c.State, MaxFieldLength),
		Restarts: c.Restarts, ExitCode: c.ExitCode, Signal: clean(c.Signal, MaxFieldLength), OOMKilled: c.OOMKilled,
		Health: clean(c.Health, MaxFieldLength), ImageDigest: clean(c.ImageDigest, MaxFieldLength)}
	if c.StartedAt != nil {
		out.StartedAt = c.StartedAt.UTC()
	}
	if c.ExitedAt != nil {
		out.ExitedAt = c.ExitedAt.UTC()
	}
	return out
}

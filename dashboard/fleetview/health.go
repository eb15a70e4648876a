package fleetview

import (
	"fmt"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// The Deployment's Degraded condition (ADR 0019 A.6): True with reason
// ServicesDegraded while devices run the current revision with services at
// fault; False with NoDegradedDevices otherwise. Its observedGeneration is
// the revision's.
const (
	conditionDegraded      = "Degraded"
	reasonServicesDegraded = "ServicesDegraded"
)

// degradedOf is the degradation of st's revision: its Degraded condition
// of the status's generation True (nil: none, or an operator that does
// not set the condition). Count and Devices come from status.degraded when
// the operator writes it, else from the streams (fillDeploymentHistory).
func degradedOf(st fleetv1.DeploymentStatus) *Degraded {
	for i := range st.Conditions {
		c := &st.Conditions[i]
		if c.Type == conditionDegraded && c.Status == metav1.ConditionTrue && c.ObservedGeneration == st.ObservedGeneration {
			return &Degraded{Since: c.LastTransitionTime.UTC(), Message: clean(c.Message, MaxErrorLength), Devices: []DegradedDevice{}}
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

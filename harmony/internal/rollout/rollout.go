// Package rollout applies harmony's Fleet Deployment and waits for its
// rollout: a server-side apply with field manager "harmony" returns the
// object's UID and generation, and Wait follows the Deployment status until
// the revision with exactly that UID and generation succeeds or fails.
//
// Invariants: the applied object is a pure function of its input (no time,
// no random value), so an identical apply leaves the generation unchanged;
// Wait never takes the status of another revision for its own: an older
// generation's success does not complete it, a newer generation or a
// recreated object ends it with ErrSuperseded. Only package harmony imports
// it.
package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// FieldManager is the server-side apply field manager of every apply.
const FieldManager = "harmony"

// Resource is the Fleet Deployment resource.
var Resource = schema.GroupVersionResource{Group: fleetv1.GroupVersion.Group, Version: fleetv1.GroupVersion.Version, Resource: "deployments"}

// ErrApply means the API server refused or failed the apply.
var ErrApply = errors.New("rollout: apply failed")

// ErrSuperseded means the Deployment moved past the applied revision (a
// newer generation was applied, or the object was deleted or recreated)
// before that revision finished: its outcome will never be reported.
var ErrSuperseded = errors.New("rollout: the applied revision was superseded")

// ErrNoTargets means the operator resolved no target for the applied
// revision; the error carries the TargetsResolved condition's reason and
// message.
var ErrNoTargets = errors.New("rollout: the revision has no targets")

// Applied identifies the revision an apply made.
type Applied struct {
	// Namespace and Name of the Deployment.
	Namespace string
	Name      string
	// UID and Generation the apply returned: the revision to wait for.
	UID        string
	Generation int64
}

// Apply server-side applies d (its TypeMeta, name, namespace, labels,
// annotations and spec; never status) with field manager FieldManager,
// forcing ownership of conflicting fields, and returns the revision.
func Apply(ctx context.Context, client dynamic.Interface, d *fleetv1.Deployment) (Applied, error) {
	obj, err := applyObject(d)
	if err != nil {
		return Applied{}, err
	}
	got, err := client.Resource(Resource).Namespace(d.Namespace).Apply(ctx, d.Name, obj,
		metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	if err != nil {
		return Applied{}, fmt.Errorf("%w: Deployment %s/%s: %w", ErrApply, d.Namespace, d.Name, err)
	}
	return Applied{Namespace: got.GetNamespace(), Name: got.GetName(), UID: string(got.GetUID()), Generation: got.GetGeneration()}, nil
}

// applyObject is the apply configuration of d: only the fields harmony
// owns, so defaults and status stay with their owners.
func applyObject(d *fleetv1.Deployment) (*unstructured.Unstructured, error) {
	type meta struct {
		Name        string            `json:"name"`
		Namespace   string            `json:"namespace"`
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	b, err := json.Marshal(struct {
		APIVersion string                 `json:"apiVersion"`
		Kind       string                 `json:"kind"`
		Metadata   meta                   `json:"metadata"`
		Spec       fleetv1.DeploymentSpec `json:"spec"`
	}{
		APIVersion: fleetv1.GroupVersion.String(), Kind: "Deployment",
		Metadata: meta{Name: d.Name, Namespace: d.Namespace, Labels: d.Labels, Annotations: d.Annotations},
		Spec:     d.Spec,
	})
	if err != nil {
		return nil, fmt.Errorf("rollout: encode Deployment: %w", err)
	}
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("rollout: encode Deployment: %w", err)
	}
	return obj, nil
}

// FailedError is a revision that failed: a target (or a canary) reported a
// failure.
type FailedError struct {
	// Applied is the revision that failed.
	Applied Applied
	// Status is its status: counts and the latest device failure.
	Status fleetv1.DeploymentStatus
}

// Error gives the counts and the latest device error.
func (e *FailedError) Error() string {
	return fmt.Sprintf("rollout of %s/%s generation %d failed: %s", e.Applied.Namespace, e.Applied.Name, e.Applied.Generation, Summary(e.Status))
}

// TimeoutError is a wait that ended before the revision finished.
type TimeoutError struct {
	// Applied is the revision waited for.
	Applied Applied
	// Status is the last status of the revision seen (zero when the
	// operator never reported it).
	Status fleetv1.DeploymentStatus
	// Err is the context's error.
	Err error
}

// Error gives the last status seen.
func (e *TimeoutError) Error() string {
	if e.Status.Revision == nil {
		return fmt.Sprintf("gave up waiting for %s/%s generation %d: the operator has not reported this revision yet: %v",
			e.Applied.Namespace, e.Applied.Name, e.Applied.Generation, e.Err)
	}
	return fmt.Sprintf("gave up waiting for %s/%s generation %d: %s: %v", e.Applied.Namespace, e.Applied.Name, e.Applied.Generation, Summary(e.Status), e.Err)
}

// Unwrap returns the context's error.
func (e *TimeoutError) Unwrap() error { return e.Err }

// Summary is one line of a revision's status: phase, counts, canary stage
// and the latest device error.
func Summary(s fleetv1.DeploymentStatus) string {
	c := s.Counts
	out := fmt.Sprintf("%s: %d succeeded, %d pending, %d failed of %d", s.Phase, c.Succeeded, c.Pending, c.Failed, c.Total)
	if c.Canaries > 0 {
		out += fmt.Sprintf("; canaries %d/%d converged, %d failed", c.CanariesSucceeded, c.Canaries, c.CanariesFailed)
	}
	if f := s.LatestFailure; f != nil {
		out += fmt.Sprintf("; latest error from device %s: %s", f.Device, f.Error)
	}
	return out
}

// WaitOptions configure Wait.
type WaitOptions struct {
	// Interval between two reads of the status. Default 1s.
	Interval time.Duration
	// Progress, when set, is called with the revision's status each time it
	// changes.
	Progress func(fleetv1.DeploymentStatus)
}

// Wait reads the Deployment's status until the revision a describes
// succeeds (nil), fails (*FailedError), is superseded (ErrSuperseded), has
// no targets (ErrNoTargets) or ctx ends (*TimeoutError). It returns the
// last status of that revision.
func Wait(ctx context.Context, client dynamic.Interface, a Applied, o WaitOptions) (fleetv1.DeploymentStatus, error) {
	interval := o.Interval
	if interval <= 0 {
		interval = time.Second
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var last fleetv1.DeploymentStatus
	var lastJSON string
	for {
		d, err := get(ctx, client, a)
		switch {
		case err != nil && ctx.Err() != nil:
			return last, &TimeoutError{Applied: a, Status: last, Err: ctx.Err()}
		case err != nil:
			return last, err
		}
		st, done, err := judge(a, d)
		if st.Revision != nil {
			last = st
			if b, _ := json.Marshal(st); string(b) != lastJSON && o.Progress != nil {
				lastJSON = string(b)
				o.Progress(st)
			}
		}
		if done {
			return last, err
		}
		select {
		case <-ctx.Done():
			return last, &TimeoutError{Applied: a, Status: last, Err: ctx.Err()}
		case <-tick.C:
		}
	}
}

func get(ctx context.Context, client dynamic.Interface, a Applied) (*fleetv1.Deployment, error) {
	u, err := client.Resource(Resource).Namespace(a.Namespace).Get(ctx, a.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: Deployment %s/%s was deleted", ErrSuperseded, a.Namespace, a.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("rollout: read Deployment %s/%s: %w", a.Namespace, a.Name, err)
	}
	var d fleetv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &d); err != nil {
		return nil, fmt.Errorf("rollout: decode Deployment %s/%s: %w", a.Namespace, a.Name, err)
	}
	return &d, nil
}

// judge decides from one read of the Deployment: the status of a's revision
// (zero when the status describes another one), whether waiting is over,
// and the outcome.
func judge(a Applied, d *fleetv1.Deployment) (fleetv1.DeploymentStatus, bool, error) {
	if string(d.UID) != a.UID {
		return fleetv1.DeploymentStatus{}, true, fmt.Errorf("%w: Deployment %s/%s was deleted and recreated (uid %s, applied %s)", ErrSuperseded, a.Namespace, a.Name, d.UID, a.UID)
	}
	if d.Generation > a.Generation {
		return fleetv1.DeploymentStatus{}, true, fmt.Errorf("%w: Deployment %s/%s is at generation %d, applied %d: another apply replaced this revision", ErrSuperseded, a.Namespace, a.Name, d.Generation, a.Generation)
	}
	st := d.Status
	if st.ObservedGeneration == a.Generation {
		if c := meta.FindStatusCondition(st.Conditions, fleetv1.ConditionTargetsResolved); c != nil &&
			c.ObservedGeneration == a.Generation && c.Status == metav1.ConditionFalse {
			return fleetv1.DeploymentStatus{}, true, fmt.Errorf("%w: %s: %s", ErrNoTargets, c.Reason, c.Message)
		}
	}
	if r := st.Revision; r == nil || r.UID != a.UID || r.Generation != a.Generation {
		return fleetv1.DeploymentStatus{}, false, nil
	}
	switch st.Phase {
	case fleetv1.PhaseSucceeded:
		if st.Counts.Total == 0 {
			return st, true, fmt.Errorf("%w: the revision succeeded with no target", ErrNoTargets)
		}
		return st, true, nil
	case fleetv1.PhaseFailed:
		return st, true, &FailedError{Applied: a, Status: st}
	}
	return st, false, nil
}

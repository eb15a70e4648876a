// Package kstatus writes the status of Fleet objects for every role of the
// operator: server-side apply of a status subresource under a field owner,
// and conditions that keep their transition time. Imported by the roles of
// the operator only.
package kstatus

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fleetv1 "github.com/nationtech/harmony-fleet/k8s/api/v1alpha1"
)

// Apply server-side-applies status (a pointer to a status struct) to
// the status subresource of a Fleet object, as field manager owner: only
// the fields set in status are claimed, so several controllers can own
// different parts of one status.
func Apply(ctx context.Context, c client.Client, kind, namespace, name string, status any, owner string) error {
	return ApplyAt(ctx, c, kind, namespace, name, "", status, owner)
}

// ApplyAt is Apply with an optimistic lock: when
// resourceVersion is set, the apply is refused with a Conflict if the
// object changed since that version. A status decided from the object's
// other fields (the Device's reported labels are decided from its
// metadata.labels) must use it: a plain apply carries no version, so a
// status decided from a stale cached copy would overwrite a newer one.
func ApplyAt(ctx context.Context, c client.Client, kind, namespace, name, resourceVersion string, status any, owner string) error {
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return fmt.Errorf("status of %s %s/%s: %w", kind, namespace, name, err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": fleetv1.GroupVersion.String(),
		"kind":       kind,
		"metadata":   map[string]any{"name": name, "namespace": namespace},
		"status":     st,
	}}
	if resourceVersion != "" {
		u.SetResourceVersion(resourceVersion)
	}
	if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(owner), client.ForceOwnership); err != nil {
		return fmt.Errorf("patch status of %s %s/%s: %w", kind, namespace, name, err)
	}
	return nil
}

// OwnConditions returns the conditions cs as they should be written over
// current, the conditions of the object as last read: each goes through
// meta.SetStatusCondition on a copy of current, so it keeps its
// lastTransitionTime while its status is unchanged. Only the types in cs are
// returned, in their order: server-side apply must claim no condition of
// another field owner.
func OwnConditions(current []metav1.Condition, cs ...metav1.Condition) []metav1.Condition {
	base := slices.Clone(current)
	out := make([]metav1.Condition, 0, len(cs))
	for _, c := range cs {
		if c.LastTransitionTime.IsZero() {
			// The API keeps seconds: a transition time that round-trips.
			c.LastTransitionTime = metav1.NewTime(time.Now().Truncate(time.Second))
		}
		meta.SetStatusCondition(&base, c)
		out = append(out, *meta.FindStatusCondition(base, c.Type))
	}
	return out
}

// ApplyTargetsResolved applies the TargetsResolved condition of a
// Deployment or TaskRun (kind) as field manager owner, and only it: True
// with reason fleetv1.ReasonResolved, False with any other, observed at
// generation (the revision's or the creation's); current are the object's
// conditions as last read.
func ApplyTargetsResolved(ctx context.Context, c client.Client, kind string, obj client.Object, current []metav1.Condition,
	generation int64, reason, message, owner string) error {
	status := metav1.ConditionTrue
	if reason != fleetv1.ReasonResolved {
		status = metav1.ConditionFalse
	}
	// Only the fields this controller owns: a whole status would also
	// carry fields of other owners (the runners' counts and phase) at
	// their zero values and take them.
	type resolvedStatus struct {
		Conditions []metav1.Condition `json:"conditions"`
	}
	st := resolvedStatus{Conditions: OwnConditions(current, metav1.Condition{
		Type: fleetv1.ConditionTargetsResolved, Status: status, Reason: reason, Message: message, ObservedGeneration: generation,
	})}
	return Apply(ctx, c, kind, obj.GetNamespace(), obj.GetName(), &st, owner)
}

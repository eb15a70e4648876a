package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TaskRun runs one bounded maintenance task on the devices its selector
// matches. Its controller is later work; the type and CRD exist now.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=ftr;ftaskrun,categories=fleet
// +kubebuilder:printcolumn:name="Task",type=string,JSONPath=`.spec.task`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type TaskRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   TaskRunSpec   `json:"spec"`
	Status TaskRunStatus `json:"status,omitempty"`
}

// TaskName names a fixed maintenance operation.
// +kubebuilder:validation:Enum=system-upgrade
type TaskName string

// TaskSystemUpgrade is an apt full-upgrade run by the root updater.
const TaskSystemUpgrade TaskName = "system-upgrade"

// TaskRunSpec is the task and its targets.
type TaskRunSpec struct {
	// Task to run.
	Task TaskName `json:"task"`
	// TargetSelector selects devices by their labels.
	TargetSelector TargetSelector `json:"targetSelector"`
}

// TaskRunStatus summarises the task on its targets.
type TaskRunStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// +optional
	Phase string `json:"phase,omitempty"`
	// +optional
	Counts RolloutCounts `json:"counts,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TaskRunList is a list of TaskRuns.
//
// +kubebuilder:object:root=true
type TaskRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []TaskRun `json:"items"`
}

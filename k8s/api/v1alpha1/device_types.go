package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Reserved labels: owned by the control plane. A device's self-reported
// labels can never add, change or remove them.
const (
	// LabelBlacklist quarantines a device: it is excluded from every new
	// revision and the auth callout refuses its identity.
	LabelBlacklist = "blacklist"
	// LabelCanary marks a canary: canaries of a revision converge before it
	// is released to the remaining targets.
	LabelCanary = "canary"
	// ReservedLabelPrefix: every label under this prefix is the control
	// plane's.
	ReservedLabelPrefix = "fleet.nationtech.io/"
)

// Device is one managed Linux device. Its name is the device id used in
// subjects and KV keys.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=fdev,categories=fleet
// +kubebuilder:printcolumn:name="Liveness",type=string,JSONPath=`.status.liveness`
// +kubebuilder:printcolumn:name="Liveness-Since",type=date,JSONPath=`.status.lastHeartbeat`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.status.inventory.agentVersion`
// +kubebuilder:printcolumn:name="Degraded",type=integer,JSONPath=`.status.degradedWorkloads`
// +kubebuilder:printcolumn:name="Labels-Overridden",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="LabelsOverridden")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63 && self.metadata.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name is the device id: a DNS label (at most 63 lowercase letters, digits and '-', no dots)"
type Device struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   DeviceSpec   `json:"spec"`
	Status DeviceStatus `json:"status,omitempty"`
}

// DeviceSpec is the device's identity and the administrator's label pins.
// Only an administrator writes it: enrollment sets identitySubject once, the
// operator never writes the spec.
//
// +kubebuilder:validation:XValidation:rule="!has(self.labels) || !has(self.removedLabels) || self.removedLabels.all(k, !(k in self.labels))",messageExpression="'spec.removedLabels: ' + self.removedLabels.filter(k, k in self.labels)[0] + ' is also in spec.labels: pin a key either to a value (spec.labels) or to its absence (spec.removedLabels), not both'"
type DeviceSpec struct {
	// IdentitySubject is the OIDC subject (the machine user's id) the device
	// authenticates as.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	IdentitySubject string `json:"identitySubject"`
	// Labels pins labels: the operator keeps each key at this value on
	// metadata.labels whatever the device reports (the report stays visible
	// in status.reportedLabels and the LabelsOverridden condition). Remove
	// the entry to give the key back to the reports. Reserved keys
	// (blacklist, fleet.nationtech.io/*) cannot be pinned: set them on
	// metadata.labels.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, !format.qualifiedName().validate(k).hasValue())",messageExpression="'spec.labels: key ' + self.filter(k, format.qualifiedName().validate(k).hasValue())[0] + ' is no label key: use an optional DNS subdomain prefix and /, then at most 63 letters, digits, -, _ or ., starting and ending with a letter or digit (e.g. site or example.com/site)'"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k != 'blacklist' && !k.startsWith('fleet.nationtech.io/'))",messageExpression="'spec.labels: key ' + self.filter(k, k == 'blacklist' || k.startsWith('fleet.nationtech.io/'))[0] + ' is reserved to the control plane (blacklist and keys under fleet.nationtech.io/ cannot be pinned): set it on metadata.labels (kubectl label)'"
	Labels map[string]LabelValue `json:"labels,omitempty"`
	// RemovedLabels pins the absence of label keys: the operator keeps them
	// off metadata.labels whatever the device reports. Remove the entry to
	// give the key back to the reports. Reserved keys cannot be pinned.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=317
	// +kubebuilder:validation:XValidation:rule="self.all(k, !format.qualifiedName().validate(k).hasValue())",messageExpression="'spec.removedLabels: ' + self.filter(k, format.qualifiedName().validate(k).hasValue())[0] + ' is no label key: use an optional DNS subdomain prefix and /, then at most 63 letters, digits, -, _ or ., starting and ending with a letter or digit (e.g. site or example.com/site)'"
	// +kubebuilder:validation:XValidation:rule="self.all(k, k != 'blacklist' && !k.startsWith('fleet.nationtech.io/'))",messageExpression="'spec.removedLabels: ' + self.filter(k, k == 'blacklist' || k.startsWith('fleet.nationtech.io/'))[0] + ' is reserved to the control plane (blacklist and keys under fleet.nationtech.io/ cannot be pinned): remove it from metadata.labels (kubectl label)'"
	RemovedLabels []string `json:"removedLabels,omitempty"`
}

// LabelValue is the value of a pinned label (spec.labels): a Kubernetes
// label value.
//
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:XValidation:rule="!format.labelValue().validate(self).hasValue()",message="spec.labels: every value must be a label value: at most 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit, or empty"
type LabelValue string

// Liveness of a device.
type Liveness string

// Liveness values.
const (
	LivenessUnknown Liveness = "Unknown"
	LivenessOnline  Liveness = "Online"
	LivenessStale   Liveness = "Stale"
)

// DeviceStatus is what the device reported, changed on transitions only
// (never per heartbeat).
type DeviceStatus struct {
	// LastHeartbeat is the stream time of the heartbeat the last liveness
	// transition was decided on: for Online, the heartbeat that brought the
	// device Online; for Stale, when it was last heard from. It is written
	// on liveness transitions only, never per heartbeat (the printer column
	// Liveness-Since shows it); the live heartbeat is in the stream.
	// +optional
	LastHeartbeat *metav1.Time `json:"lastHeartbeat,omitempty"`
	// +optional
	Liveness Liveness `json:"liveness,omitempty"`
	// +optional
	Inventory *DeviceInventory `json:"inventory,omitempty"`
	// ReportedLabels are the labels the device last reported; the operator
	// mirrors them onto metadata.labels, except reserved ones, at most 64
	// of them (4 KiB).
	// +optional
	ReportedLabels map[string]string `json:"reportedLabels,omitempty"`
	// PinnedLabels are the label keys of spec.labels and spec.removedLabels
	// the operator last applied to metadata.labels. A key that leaves the
	// spec is given back to the reports: it takes the reported value, or is
	// removed when not reported.
	// +optional
	// +listType=set
	PinnedLabels []string `json:"pinnedLabels,omitempty"`
	// Workloads is the state of the containers of each Deployment the
	// device runs, from its last container report (device.containers), at
	// most 32 Deployments (the first in namespace and name order) of at
	// most 16 containers each. The operator writes it at most once a minute
	// per device; absent until the device reports its containers.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	Workloads []DeviceWorkload `json:"workloads,omitempty"`
	// DegradedWorkloads is how many Deployments the device's last
	// container report says are Degraded (kubectl get fdev: DEGRADED).
	// +optional
	// +kubebuilder:validation:Minimum=0
	DegradedWorkloads int32 `json:"degradedWorkloads,omitempty"`
	// WorkloadsTruncated is true when the device's last container report
	// had more than status.workloads can hold (Deployments, containers or
	// the device's own truncation): what is listed is a part.
	// +optional
	WorkloadsTruncated bool `json:"workloadsTruncated,omitempty"`
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// DeviceWorkload is one Deployment revision's containers on the device, as
// the device reported them. Every string is device data: invisible
// characters are written as visible escapes and each is cut to its bound.
type DeviceWorkload struct {
	// Namespace of the Deployment.
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// Deployment is the Deployment's name.
	// +kubebuilder:validation:MaxLength=63
	Deployment string `json:"deployment"`
	// Revision is the id of the revision the device runs.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Revision string `json:"revision,omitempty"`
	// Degraded is the reason the device reports this Deployment Degraded
	// (CrashLoop, OOMKilled, Down, Unhealthy); empty while it is not.
	// +optional
	// +kubebuilder:validation:MaxLength=32
	Degraded string `json:"degraded,omitempty"`
	// Containers: init containers first, then services in the score's
	// order; at most 16.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Containers []DeviceContainer `json:"containers,omitempty"`
}

// DeviceContainer is one container's state on the device.
type DeviceContainer struct {
	// Name is the service (or init container) name.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Role is init or service.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Role string `json:"role,omitempty"`
	// State is running, exited, created or other.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	State string `json:"state,omitempty"`
	// Restarts is the engine's restart count of the container.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Restarts int32 `json:"restarts"`
	// LastExit is how the container last exited; absent when it never
	// did.
	// +optional
	LastExit *ContainerExit `json:"lastExit,omitempty"`
	// Health is starting, healthy or unhealthy for a service with a
	// health check; empty without one.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Health string `json:"health,omitempty"`
	// ImageDigest is the digest of the image the container runs
	// (sha256:…), else the image id.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	ImageDigest string `json:"imageDigest,omitempty"`
}

// ContainerExit is how a container last exited.
type ContainerExit struct {
	// Code is the exit code (128 + n when killed by signal n).
	Code int32 `json:"code"`
	// Signal names the signal that killed it (SIGKILL …), if any.
	// +optional
	// +kubebuilder:validation:MaxLength=16
	Signal string `json:"signal,omitempty"`
	// OOMKilled is true when the kernel killed it out of memory.
	// +optional
	OOMKilled bool `json:"oomKilled,omitempty"`
	// At is when it exited, by the device's clock (informative only).
	// +optional
	At *metav1.Time `json:"at,omitempty"`
}

// DeviceInventory is the device's self-description, as the operator
// bounds it: each string at most 256 bytes, invisible and bidirectional
// characters written as visible escapes (docs/devices.md, "What a device
// can put on its Device").
type DeviceInventory struct {
	// +kubebuilder:validation:MaxLength=256
	OS string `json:"os,omitempty"`
	// +kubebuilder:validation:MaxLength=256
	Arch string `json:"arch,omitempty"`
	// +kubebuilder:validation:MaxLength=256
	Kernel string `json:"kernel,omitempty"`
	// +kubebuilder:validation:MaxLength=256
	AgentVersion string `json:"agentVersion,omitempty"`
	// TimeZone is the IANA name of the device's local time zone, in which
	// it reads maintenance windows (ADR 0029), as its agent last reported
	// it; absent when the agent reported none or one that is no IANA name
	// of the operator's tz database.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	TimeZone string `json:"timeZone,omitempty"`
}

// DeviceList is a list of Devices.
//
// +kubebuilder:object:root=true
type DeviceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Device `json:"items"`
}

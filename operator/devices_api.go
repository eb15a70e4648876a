package operator

import "github.com/nationtech/harmony-fleet/operator/devices"

// The Device role lives in package devices; these names keep the root's
// API for its callers (cmd/fleet-operator, tests).
type (
	// DeviceReconciler is the Device controller (devices.Reconciler).
	DeviceReconciler = devices.Reconciler
	// LabelPins are an administrator's pins on a Device's labels
	// (devices.LabelPins).
	LabelPins = devices.LabelPins
	// DeviceStore is what the Device controller needs of the event store
	// (devices.Store).
	DeviceStore = devices.Store
)

// Constants of the Device role (package devices).
const (
	// DefaultStaleAfter is how long a device stays Online after its last
	// heartbeat when Options.StaleAfter is zero.
	DefaultStaleAfter = devices.DefaultStaleAfter
	// DefaultDeviceWorkers is how many Devices the Device controller
	// reconciles at once by default.
	DefaultDeviceWorkers = devices.DefaultDeviceWorkers
	// FieldOwnerDevices is the field manager of the Device status.
	FieldOwnerDevices = devices.FieldOwnerDevices
	// FinalizerDeviceIdentity lets the operator delete the Device's
	// fleet-identity key before the Device disappears.
	FinalizerDeviceIdentity = devices.FinalizerDeviceIdentity
	// AnnotationRegisteredIdentity records the identity subject whose
	// fleet-identity key the operator wrote for the Device.
	AnnotationRegisteredIdentity = devices.AnnotationRegisteredIdentity
	// IndexDeviceID is the cache field index of Devices by device id.
	IndexDeviceID = devices.IndexDeviceID

	// MaxReportedLabels is how many reported labels are mirrored onto a
	// Device.
	MaxReportedLabels = devices.MaxReportedLabels
	// MaxReportedLabelBytes bounds the mirrored reported labels, in bytes.
	MaxReportedLabelBytes = devices.MaxReportedLabelBytes
	// MaxInventoryField is the longest inventory string a Device keeps.
	MaxInventoryField = devices.MaxInventoryField
	// MaxDeviceStatusBytes bounds a Device's status, workloads aside.
	MaxDeviceStatusBytes = devices.MaxDeviceStatusBytes
	// MaxDeviceWorkloads is how many Deployments status.workloads lists.
	MaxDeviceWorkloads = devices.MaxDeviceWorkloads
	// MaxDeviceWorkloadContainers is how many containers of one Deployment
	// status.workloads lists.
	MaxDeviceWorkloadContainers = devices.MaxDeviceWorkloadContainers
	// MaxDeviceWorkloadsBytes bounds status.workloads as JSON.
	MaxDeviceWorkloadsBytes = devices.MaxDeviceWorkloadsBytes
	// WorkloadsInterval is the least time between two writes of a
	// Device's status.workloads for its containers reports.
	WorkloadsInterval = devices.WorkloadsInterval

	// MetricDevices counts Devices by liveness.
	MetricDevices = devices.MetricDevices
	// MetricDeviceReportsTrimmed counts inventories cut to a Device's
	// bounds, by field.
	MetricDeviceReportsTrimmed = devices.MetricDeviceReportsTrimmed
	// MetricContainerRestarts counts Deployments' container restarts.
	MetricContainerRestarts = devices.MetricContainerRestarts
)

// MergeReportedLabels merges a device's reported labels into a Device's
// labels (devices.MergeReportedLabels).
func MergeReportedLabels(labels, owned, reported map[string]string) (newLabels, newOwned map[string]string) {
	return devices.MergeReportedLabels(labels, owned, reported)
}

// ClaimPinnedKeys returns owned with the pinned keys claimed by the reports
// (devices.ClaimPinnedKeys).
func ClaimPinnedKeys(owned map[string]string, pins LabelPins, pinned []string) map[string]string {
	return devices.ClaimPinnedKeys(owned, pins, pinned)
}

// PinLabels applies an administrator's pins to a Device's labels
// (devices.PinLabels).
func PinLabels(labels, owned map[string]string, pins LabelPins, pinned []string) (newLabels map[string]string, newPinned []string) {
	return devices.PinLabels(labels, owned, pins, pinned)
}

// ReservedLabel reports whether a label key belongs to the control plane
// (devices.ReservedLabel).
func ReservedLabel(key string) bool { return devices.ReservedLabel(key) }

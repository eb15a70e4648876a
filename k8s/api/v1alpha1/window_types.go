package v1alpha1

// MaintenanceWindow is a daily window in the device's local time, shared by
// a TaskRun's spec.maintenanceWindow (when a task may start) and a
// Deployment's spec.rollout.maintenanceWindow and spec.rollout.fetchWindow
// (when a device may switch to a revision, and fetch its images ahead; ADR
// 0029). One type, so both CRDs carry the same validation rules. The agent
// reads it in the device's local time (events.MaintenanceWindow.Open).
type MaintenanceWindow struct {
	// Start is the local time the window opens, HH:MM (24-hour clock).
	// +kubebuilder:validation:Pattern=`^([01][0-9]|2[0-3]):[0-5][0-9]$`
	Start string `json:"start"`
	// Duration is how long the window stays open, from 1m to 24h (a Go
	// duration: "2h", "90m"). A window may cross midnight.
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:XValidation:rule="self.matches('^([0-9]+h)?([0-9]+m)?$') && self != '' && duration(self) >= duration('1m') && duration(self) <= duration('24h')",message="maintenanceWindow.duration must be hours and minutes from 1m to 24h, e.g. 2h or 1h30m"
	Duration string `json:"duration"`
}

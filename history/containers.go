package history

import (
	"time"

	"github.com/nationtech/harmony-fleet/events"
)

// ContainersSnapshot is a device's container report: its containers per
// Deployment as it reported them, clipped to the contract's bounds
// (events.DeviceContainers.Clip: at most events.MaxContainerWorkloads
// Deployments of events.MaxWorkloadContainers containers, every string
// made printable and cut).
type ContainersSnapshot struct {
	// Stored is when the stream stored the report; ID is its event id.
	Stored time.Time `json:"stored"`
	ID     string    `json:"id"`
	// Workloads are the Deployments, as the device sorted them.
	Workloads []events.WorkloadContainers `json:"workloads"`
	// Truncated is true when the device cut its report or the clip left
	// something out.
	Truncated bool `json:"truncated,omitempty"`
}

// snapshotOf clips a container report.
func snapshotOf(rec events.Record, d events.DeviceContainers) *ContainersSnapshot {
	d = d.Clip()
	s := &ContainersSnapshot{Stored: rec.Stored.UTC(), ID: rec.Event.ID.String(), Workloads: d.Workloads, Truncated: d.Truncated}
	if s.Workloads == nil {
		s.Workloads = []events.WorkloadContainers{}
	}
	return s
}

package history

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/nationtech/harmony-fleet/events"
	"github.com/nationtech/harmony-fleet/projections"
)

// TestTheTimelineSaysWhyADeviceJoinedOrLeftAFollowDeployment: the
// summaries of a Follow Deployment's membership transitions (ADR 0026)
// name the device, the reason and the change; a removal without follow
// reads as before.
func TestTheTimelineSaysWhyADeviceJoinedOrLeftAFollowDeployment(t *testing.T) {
	counts := events.RolloutCounts{Total: 2, Succeeded: 1, Pending: 1, Followers: 1}
	for _, tc := range []struct {
		name string
		typ  events.Type
		d    events.RolloutTransition
		want string
	}{
		{"a device enrolled later joins", events.TypeRolloutTargetAdded,
			events.RolloutTransition{Device: "rpi-9", Follow: true, Reason: "Device created", Change: "site=lyon"},
			"target rpi-9 joined after the freeze: Device created: site=lyon [1/2 succeeded, 0 failed, 1 pending]"},
		{"a device that joins a failed revision is handed the last that succeeded", events.TypeRolloutTargetAdded,
			events.RolloutTransition{Generation: 2, RevisionID: "2-bbbbbbbb", Device: "rpi-9", Follow: true, Reason: "Device created", Change: "site=lyon",
				HandedGeneration: 1, HandedRevisionID: "1-aaaaaaaa"},
			"target rpi-9 joined after the freeze: Device created: site=lyon; handed generation 1 (1-aaaaaaaa), the last whose rollout succeeded, as revision 2-bbbbbbbb failed [1/2 succeeded, 0 failed, 1 pending]"},
		{"a follower the failed rollout never reached is handed the last that succeeded", events.TypeRolloutTargetAdded,
			events.RolloutTransition{Generation: 2, RevisionID: "2-bbbbbbbb", Device: "rpi-9", Follow: true, Reason: projections.ReasonFailedBeforeHanded,
				HandedGeneration: 1, HandedRevisionID: "1-aaaaaaaa"},
			"follower rpi-9 was never handed revision 2-bbbbbbbb before its rollout failed: handed generation 1 (1-aaaaaaaa), the last whose rollout succeeded [1/2 succeeded, 0 failed, 1 pending]"},
		{"a device that joins a revision with a plan says its batch and budget group", events.TypeRolloutTargetAdded,
			events.RolloutTransition{Device: "rpi-9", Follow: true, Reason: "Device created", Change: "site=lyon", Batch: 2, BudgetGroup: "lyon"},
			"target rpi-9 joined after the freeze: Device created: site=lyon; in batch 2, budget group lyon [1/2 succeeded, 0 failed, 1 pending]"},
		{"a relabelled device leaves and loses its workload", events.TypeRolloutTargetRemoved,
			events.RolloutTransition{Device: "rpi-9", Follow: true, Error: "labels no longer match the target selector: site=paris (was site=lyon)"},
			"target rpi-9 left, its workload is removed: labels no longer match the target selector: site=paris (was site=lyon) [1/2 succeeded, 0 failed, 1 pending]"},
		{"a removal without follow reads as before", events.TypeRolloutTargetRemoved,
			events.RolloutTransition{Device: "rpi-9", Error: "Device deleted"},
			"target rpi-9 removed: Device deleted [1/2 succeeded, 0 failed, 1 pending]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.d.Counts = counts
			if diff := cmp.Diff(tc.want, transitionSummary(tc.typ, tc.d)); diff != "" {
				t.Errorf("summary (-want +got):\n%s", diff)
			}
		})
	}
}
